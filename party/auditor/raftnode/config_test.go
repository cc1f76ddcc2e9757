package raftnode

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func TestConfigValidate(t *testing.T) {
	ca := newTestCA(t)
	server, client := ca.tlsPair(t, "auditor", "a")
	good := func() Config {
		return Config{DataDir: "/d", NodeID: "a", BindAddr: "127.0.0.1:0", ServerTLS: server, ClientTLS: client,
			StateMachine: newChainSM(), Bootstrap: true, Peers: []Peer{{"a", "10.0.0.1:7000"}, {"b", "10.0.0.2:7000"}}}
	}
	if err := (func() *Config { c := good(); return &c })().Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	tests := []struct {
		field string
		edit  func(*Config)
	}{
		{"DataDir", func(c *Config) { c.DataDir = "" }},
		{"NodeID", func(c *Config) { c.NodeID = "" }},
		{"NodeID", func(c *Config) { c.NodeID = "a b" }},
		{"BindAddr", func(c *Config) { c.BindAddr = "nope" }},
		{"AdvertiseAddr", func(c *Config) { c.AdvertiseAddr = "0.0.0.0:7000" }},
		{"AdvertiseAddr", func(c *Config) { c.AdvertiseAddr = "h:0" }},
		{"ServerTLS", func(c *Config) { c.ServerTLS = nil }},
		{"ServerTLS", func(c *Config) { s := server.Clone(); s.ClientAuth = tls.RequestClientCert; c.ServerTLS = s }},
		{"ClientTLS", func(c *Config) { s := client.Clone(); s.RootCAs = nil; c.ClientTLS = s }},
		{"Bootstrap", func(c *Config) { c.Join = []string{"h:1"} }},
		{"Peers", func(c *Config) { c.Bootstrap = false }},
		{"Peers[1]", func(c *Config) { c.Peers[1].ID = "a" }},
		{"Peers[1].Addr", func(c *Config) { c.Peers[1].Addr = "nohost" }},
		{"Join[0]", func(c *Config) { c.Bootstrap, c.Peers, c.Join = false, nil, []string{":7000"} }},
		{"StateMachine", func(c *Config) { c.StateMachine = nil }},
		{"timeouts", func(c *Config) { c.ApplyTimeout = -time.Second }},
	}
	for _, tt := range tests {
		c := good()
		tt.edit(&c)
		err := c.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tt.field {
			t.Errorf("want a ConfigError on %s, got %v", tt.field, err)
		}
	}
}

func TestMetricsAndReadiness(t *testing.T) {
	c := newInmemCluster(t, 3, deps{}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	submitIDs(ctx, t, c.submit, 1, 5, "x")
	n := c.nodes[c.leader()]
	reg := prometheus.NewRegistry()
	if err := n.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := n.Register(reg); err == nil {
		t.Fatal("registering the same node twice succeeded")
	}
	auditortest.WaitFor(t, 5*time.Second, "the leader to be ready", func() bool { return n.Ready() == nil })
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{"nzc_auditor_raft_leader 1", "nzc_auditor_submit_seconds_count 5", `nzc_auditor_submits_total{outcome="ok"} 5`, "nzc_auditor_apply_batch_commands_count", "nzc_auditor_raft_applied_index"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if st := n.Status(); st.State != "Leader" || len(st.Peers) != 3 {
		t.Fatalf("status %+v", st)
	}
	if _, err := n.Checkpoint(0); err == nil {
		t.Fatal("a state machine that signs nothing gave a checkpoint")
	}
	c.stop(c.leader())
	if err := n.Ready(); !errors.Is(err, ErrShutdown) {
		t.Fatalf("ready on a stopped node: %v", err)
	}
}
