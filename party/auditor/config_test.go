package auditor

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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

func TestHandler(t *testing.T) {
	c := newInmemCluster(t, 3, deps{}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for id := uint64(1); id <= 5; id++ {
		if _, _, err := c.submit(ctx, chainCmd(id, "x")); err != nil {
			t.Fatal(err)
		}
	}
	h := c.nodes[c.leader()].Handler()
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(b)
	}
	if code, _ := get("/livez"); code != 200 {
		t.Fatalf("livez %d", code)
	}
	waitFor(t, 5*time.Second, "readyz", func() bool { code, _ := get("/readyz"); return code == 200 })
	code, body := get("/metrics")
	if code != 200 {
		t.Fatalf("metrics %d", code)
	}
	for _, want := range []string{"nzc_auditor_raft_leader 1", "nzc_auditor_submit_seconds_count 5", `nzc_auditor_submits_total{outcome="ok"} 5`, "nzc_auditor_apply_batch_commands_count", "nzc_auditor_raft_applied_index"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if code, body := get("/status"); code != 200 || !strings.Contains(body, `"state":"Leader"`) {
		t.Fatalf("status %d %s", code, body)
	}
	if code, _ := get("/checkpoint"); code != 404 {
		t.Fatalf("checkpoint without a signing state machine: %d, want 404", code)
	}
	l := c.leader()
	n := c.nodes[l]
	c.stop(l)
	if code, _ := get("/livez"); code != 503 {
		t.Fatalf("livez on a stopped node: %d", code)
	}
	if err := n.Ready(); !errors.Is(err, ErrShutdown) {
		t.Fatalf("ready on a stopped node: %v", err)
	}
}
