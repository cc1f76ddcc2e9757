package auditor

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// testCluster is a cluster of Auditors started with New on loopback: the
// first founds it, the others join; every address is "127.0.0.1:0".
type testCluster struct {
	t    testing.TB
	ca   *crypto.CA
	auds []*Auditor
	cfgs []Config
	stop []func() error // cancels Run and waits for its result
}

// fastTuning makes elections quick on loopback.
var fastTuning = raftnode.Tuning{HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond, ApplyTimeout: 5 * time.Second}

// newTestCluster starts auditors ids; edit, when set, changes each one's
// Config before New.
func newTestCluster(t testing.TB, ids []string, edit func(*Config)) *testCluster {
	t.Helper()
	now := time.Now()
	ca, err := crypto.NewCA(rand.Reader, "test federation", now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, ca: ca}
	for i, id := range ids {
		cfg := c.config(id)
		if edit != nil {
			edit(&cfg)
		}
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = []string{c.auds[0].Addrs().Raft}
		}
		c.start(cfg)
		if i == 0 {
			auditortest.WaitFor(t, 15*time.Second, "the first auditor to lead", func() bool { return c.auds[0].Node().Status().State == "Leader" })
		}
	}
	auditortest.WaitFor(t, 15*time.Second, "every auditor in the cluster", func() bool { return len(c.auds[0].Node().Status().Peers) == len(ids) })
	return c
}

// config is the Config of auditor id, signing checkpoints with ledgerKeys.Key(id).
func (c *testCluster) config(id string) Config {
	c.t.Helper()
	now := time.Now()
	cred, err := c.ca.Issue(rand.Reader, crypto.IssueRequest{Peer: crypto.Peer{Role: crypto.RoleAuditor, ID: id},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)})
	if err != nil {
		c.t.Fatal(err)
	}
	return Config{
		ID: id, DataDir: c.t.TempDir(), RaftAddr: "127.0.0.1:0", IntakeAddr: "127.0.0.1:0",
		CA: c.ca.Cert, Credential: cred, SigningKey: ledgerKeys.Key(id), Logger: auditortest.Logger(c.t).With("auditor", id),
		Raft: fastTuning,
	}
}

// start runs a new Auditor until the test ends or stop is called.
func (c *testCluster) start(cfg Config) *Auditor {
	c.t.Helper()
	a, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var result error
	stopped := false
	stop := func() error {
		if !stopped {
			cancel()
			result, stopped = <-done, true
		}
		return result
	}
	c.auds, c.cfgs, c.stop = append(c.auds, a), append(c.cfgs, cfg), append(c.stop, stop)
	c.t.Cleanup(func() {
		if err := stop(); err != nil {
			c.t.Errorf("auditor %s: %v", cfg.ID, err)
		}
	})
	return a
}

func (c *testCluster) ledgers() []*Ledger {
	out := make([]*Ledger, len(c.auds))
	for i, a := range c.auds {
		out[i] = a.Ledger()
	}
	return out
}
