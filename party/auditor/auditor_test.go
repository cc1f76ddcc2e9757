package auditor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// testGenesis is a genesis naming the auditors ids (with their ledgerKey),
// a hospital and a student, and the student's registration.
func testGenesis(t testing.TB, ids []string) [][]byte {
	t.Helper()
	parties := []ledger.Party{ledgerKeys.Party("admin", ledger.RoleAdmin), ledgerKeys.Party("agg", ledger.RoleAggregator),
		ledgerKeys.Party("h1", ledger.RoleHospital), ledgerKeys.Party("s1", ledger.RoleStudent)}
	for _, id := range ids {
		parties = append(parties, ledgerKeys.Party(id, ledger.RoleAuditor))
	}
	slices.SortFunc(parties, func(a, b ledger.Party) int { return strings.Compare(a.ID, b.ID) })
	var out [][]byte
	for _, b := range []ledger.Body{
		&ledger.Genesis{Origin: "test.nzc/assembled", Parties: parties, Timestamp: 1},
		&ledger.RegisterStudent{Student: "s1", Timestamp: 2},
	} {
		cmd, err := ledger.Sign(b, "admin", ledgerKeys.Key("admin"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cmd)
	}
	return out
}

// accepted returns the commands of st's accepted entries, in order.
func accepted(t testing.TB, st *ledger.State) [][]byte {
	t.Helper()
	entries, err := st.Entries(0, st.TreeSize())
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, b := range entries {
		e, err := ledger.DecodeEntry(b)
		if err != nil {
			t.Fatal(err)
		}
		if e.Status == ledger.StatusAccepted {
			out = append(out, e.Command)
		}
	}
	return out
}

func httpGet(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestAuditorAssembled starts three auditors with New, every address
// "127.0.0.1:0" and the same genesis in each Config, as nzc init provisions
// them, and reads each part an auditor serves from the bound addresses.
func TestAuditorAssembled(t *testing.T) {
	ids := []string{"a1", "a2", "a3"}
	genesis := testGenesis(t, ids)
	c := newTestCluster(t, ids, func(c *Config) {
		c.APIAddr, c.DashboardAddr, c.OpsAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		c.Genesis = genesis
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Every auditor applies the genesis at once (Run, from Config.Genesis);
	// WaitReady returns once each has done so, and each command is then
	// accepted exactly once, whoever got there first.
	for _, a := range c.auds {
		if err := a.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	size := converged(t, c.auds)
	for _, a := range c.auds {
		if got := accepted(t, a.Ledger().State()); !slices.EqualFunc(got, genesis, func(x, y []byte) bool { return string(x) == string(y) }) {
			t.Fatalf("%s accepted %d commands, not the genesis", a.cfg.ID, len(got))
		}
	}
	// Applying it again changes nothing.
	if err := c.auds[1].ApplyGenesis(ctx, genesis); err != nil {
		t.Fatal(err)
	}
	if got := c.auds[1].Ledger().State().TreeSize(); got != size {
		t.Fatalf("a second genesis grew the log from %d to %d entries", size, got)
	}

	addrs := c.auds[0].Addrs()
	for name, a := range map[string]string{"raft": addrs.Raft, "intake": addrs.Intake, "api": addrs.API, "dashboard": addrs.Dashboard, "ops": addrs.Ops} {
		if !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":0") {
			t.Fatalf("%s address %q: want the bound loopback port", name, a)
		}
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	if code, body := httpGet(t, plain, "http://"+addrs.Ops+"/readyz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	code, body := httpGet(t, plain, "http://"+addrs.Ops+"/metrics")
	for _, want := range []string{"nzc_auditor_raft_leader 1", "nzc_auditor_submits_total", "go_goroutines"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}
	var st raftnode.Status
	if code, body := httpGet(t, plain, "http://"+addrs.Ops+"/status"); code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.ID != "a1" || len(st.Peers) != 3 {
		t.Fatalf("/status: %d %s", code, body)
	}
	keys, err := c.auds[0].Ledger().State().AuditorKeys(size)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := httpGet(t, plain, "http://"+addrs.Ops+"/checkpoint/cosigned"); code != 200 {
		t.Fatalf("/checkpoint/cosigned: %d %s", code, body)
	} else if sc, err := ledger.OpenCheckpoint([]byte(body), keys); err != nil || len(sc.Signers) != 3 {
		t.Fatalf("/checkpoint/cosigned: %v %+v", err, sc)
	}
	if code, body := httpGet(t, plain, "http://"+addrs.Dashboard+"/"); code != 200 || !strings.Contains(body, "<html") {
		t.Fatalf("dashboard: %d", code)
	}

	// The compliance API answers a compliance officer over mutual TLS.
	officer, err := c.ca.Issue(rand.Reader, crypto.IssueRequest{Peer: crypto.Peer{Role: crypto.RoleCompliance, ID: "officer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	api := compliance.NewClient(addrs.API, c.ca.Cert, officer)
	defer api.Close()
	if cs, err := api.Status(ctx); err != nil || cs.Origin != "test.nzc/assembled" || cs.Auditor.ID != "a1" {
		t.Fatalf("/v1/status: %+v %v", cs, err)
	}

	// A restarted auditor keeps its ledger and does not apply the genesis
	// again.
	if err := c.stop[2](); err != nil {
		t.Fatal(err)
	}
	cfg := c.cfgs[2]
	cfg.RaftAddr = c.auds[2].Addrs().Raft // the address its peers know
	cfg.APIAddr, cfg.DashboardAddr, cfg.OpsAddr, cfg.Join = "", "", "", nil
	again := c.start(cfg)
	// Raft's leader backs off from a follower that was down, so the
	// restarted one may learn what is committed only seconds later; its
	// genesis waits for the ledger to apply its own log first.
	rctx, rcancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer rcancel()
	if err := again.WaitReady(rctx); err != nil {
		t.Fatal(err)
	}
	if got := converged(t, []*Auditor{c.auds[0], c.auds[1], again}); got != size {
		t.Fatalf("the restart grew the log from %d to %d entries", size, got)
	}
}

// converged waits until auds hold the same log and returns its size.
func converged(t *testing.T, auds []*Auditor) int64 {
	t.Helper()
	var size int64
	auditortest.WaitFor(t, 60*time.Second, "the auditors to hold the same log", func() bool {
		st := auds[0].Ledger().State()
		size = st.TreeSize()
		for _, a := range auds[1:] {
			if o := a.Ledger().State(); o.TreeSize() != size || o.RootHash() != st.RootHash() {
				return false
			}
		}
		return size > 0
	})
	return size
}

// TestApplyGenesisRefused: a genesis the ledger refuses (here signed by a
// key that is not the administrator's) is a *GenesisError naming the
// command, and leaves the ledger without a genesis and without an entry:
// it was refused before it was proposed.
func TestApplyGenesisRefused(t *testing.T) {
	c := newTestCluster(t, []string{"solo"}, nil)
	forged, err := ledger.Sign(&ledger.Genesis{Origin: "forged", Parties: []ledger.Party{ledgerKeys.Party("admin", ledger.RoleAdmin),
		ledgerKeys.Party("solo", ledger.RoleAuditor)}, Timestamp: 1}, "admin", ledgerKeys.Key("mallory"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.auds[0].ApplyGenesis(ctx, [][]byte{forged})
	var ge *GenesisError
	if !errors.As(err, &ge) || len(ge.Refused) != 1 || !strings.Contains(err.Error(), "command 0") {
		t.Fatalf("got %v, want a GenesisError naming command 0", err)
	}
	if st := c.auds[0].Ledger().State(); st.Origin() != "" || st.TreeSize() != 0 {
		t.Fatalf("origin %q, %d entries: want no genesis and no entry", st.Origin(), st.TreeSize())
	}
}

func TestConfigValidate(t *testing.T) {
	c := &testCluster{t: t}
	now := time.Now()
	var err error
	if c.ca, err = crypto.NewCA(rand.Reader, "test federation", now.Add(-time.Hour), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		field string
		edit  func(*Config)
	}{
		{"ID", func(c *Config) { c.ID = "" }},
		{"IntakeAddr", func(c *Config) { c.IntakeAddr = "" }},
		{"CA", func(c *Config) { c.CA = nil }},
		{"Credential", func(c *Config) { c.Credential = nil }},
		{"SigningKey", func(c *Config) { c.SigningKey = c.SigningKey[:10] }},
		{"DataDir", func(c *Config) { c.DataDir = "" }},
		{"BindAddr", func(c *Config) { c.RaftAddr = "no-port" }},
		{"Peers", func(c *Config) { c.Peers = []raftnode.Peer{{ID: "a2", Addr: "127.0.0.1:7501"}} }},
		// Another auditor's id with a1's certificate: the raft id is the
		// certificate's.
		{"ID", func(c *Config) { c.ID = "a2" }},
	} {
		cfg := c.config("a1")
		tt.edit(&cfg)
		a, err := New(cfg)
		var ce *raftnode.ConfigError
		if !errors.As(err, &ce) || ce.Field != tt.field {
			if a != nil {
				_ = a.Close()
			}
			t.Errorf("%s: got %v, want a ConfigError on %s", tt.field, err, tt.field)
		}
	}
	// A taken address is an error naming the flag, and New releases what
	// it had opened.
	cfg := c.config("a1")
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	cfg2 := c.config("a2")
	cfg2.IntakeAddr = "127.0.0.1:0"
	cfg2.OpsAddr = first.Addrs().Raft // a TCP port already bound
	if _, err := New(cfg2); err == nil || !strings.Contains(err.Error(), "ops.listen") {
		t.Fatalf("ops on a taken port: %v", err)
	}
	cfg2.OpsAddr = ""
	again, err := New(cfg2)
	if err != nil {
		t.Fatalf("the data directory was not released after a failed New: %v", err)
	}
	_ = again.Close()
}

// An auditor pinned to one genesis stops when its ledger's genesis is
// another, and serves on when it is its own.
func TestForeignGenesisStopsTheAuditor(t *testing.T) {
	genesis := testGenesis(t, []string{"a1"})
	cmd, err := ledger.DecodeCommand(genesis[0])
	if err != nil {
		t.Fatal(err)
	}
	own, _ := cmd.Digest()
	now := time.Now()
	ca, err := crypto.NewCA(rand.Reader, "test federation", now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, ca: ca}
	for _, tc := range []struct {
		name string
		pin  []byte
		want error
	}{
		{"another federation's genesis", bytes.Repeat([]byte{7}, 32), ErrForeignGenesis},
		{"its own", own[:], nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := c.config("a1")
			cfg.Bootstrap, cfg.Genesis, cfg.GenesisHash = true, genesis, tc.pin
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			if tc.want != nil {
				if err := <-done; !errors.Is(err, tc.want) {
					t.Fatalf("Run: %v, want %v", err, tc.want)
				}
				return
			}
			if err := a.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run with its own genesis: %v", err)
			}
		})
	}
}
