package auditor

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
)

// A follower whose data directory was wiped rejoins a cluster whose leader
// has compacted its log: it installs the leader's state snapshot, fetches
// the history from the other auditors, has a majority of them vouch for
// its tree, and then holds their log entry for entry and is ready. An
// auditor that lost only its history.db does the same at start.
func TestWipedAuditorRejoinsFromAStateSnapshot(t *testing.T) {
	ids := []string{"a1", "a2", "a3"}
	genesis := testGenesis(t, ids)
	c := newTestCluster(t, ids, func(c *Config) {
		c.Genesis = genesis
		c.Raft.SnapshotThreshold, c.Raft.TrailingLogs = 1<<20, 4
		c.OpsAddr = "127.0.0.1:0"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, a := range c.auds {
		if err := a.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	leader := c.auds[0]
	for i := range 40 {
		submitTo(ctx, t, leader, &ledger.RegisterParty{Party: ledgerKeys.Party(fmt.Sprintf("student-%d", i), ledger.RoleStudent), Timestamp: int64(10 + i)}, "admin")
	}
	size := converged(t, c.auds)
	if _, err := leader.Node().SaveSnapshot(ctx); err != nil { // and compacts its log
		t.Fatal(err)
	}
	if err := c.stop[2](); err != nil {
		t.Fatal(err)
	}
	cfg := c.cfgs[2]
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	cfg.RaftAddr = c.auds[2].Addrs().Raft // the address its peers know
	cfg.Join = []string{leader.Addrs().Raft}
	wiped := c.start(cfg)
	if err := wiped.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if got := converged(t, []*Auditor{leader, c.auds[1], wiped}); got != size {
		t.Fatalf("the rejoined auditor holds %d entries, want %d", got, size)
	}
	// Its history is on its disk: every entry, as the others hold it.
	mine, err := wiped.Ledger().State().Entries(0, size)
	if err != nil {
		t.Fatal(err)
	}
	theirs, _ := leader.Ledger().State().Entries(0, size)
	for i := range mine {
		if string(mine[i]) != string(theirs[i]) {
			t.Fatalf("entry %d differs", i)
		}
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	auditortest.WaitFor(t, 30*time.Second, "/readyz to say ok", func() bool {
		code, body := httpGet(t, plain, "http://"+wiped.Addrs().Ops+"/readyz")
		return code == 200 && strings.TrimSpace(body) == "ok"
	})

	// An auditor whose history.db is lost starts from its own snapshot,
	// which does not hold the entries: it fetches them from the others
	// before raft starts.
	if _, err := c.auds[1].Node().SaveSnapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.stop[1](); err != nil {
		t.Fatal(err)
	}
	cfg = c.cfgs[1]
	if err := os.Remove(filepath.Join(cfg.DataDir, historyFile)); err != nil {
		t.Fatal(err)
	}
	cfg.RaftAddr, cfg.Join = c.auds[1].Addrs().Raft, nil
	lost := c.start(cfg)
	if err := lost.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if got := converged(t, []*Auditor{leader, wiped, lost}); got != size {
		t.Fatalf("the auditor that lost its history holds %d entries, want %d", got, size)
	}
}
