package raftnode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
	bolt "go.etcd.io/bbolt"
)

// seedDataDir runs a single-node cluster in a fresh data directory, commits
// some commands, takes a snapshot, and stops. It returns the directory.
func seedDataDir(t *testing.T) (string, *testCA) {
	t.Helper()
	c := newTLSCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	submitIDs(ctx, t, c.nodes[0].Submit, 1, 30, "x")
	if err := c.nodes[0].raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	submitIDs(ctx, t, c.nodes[0].Submit, 31, 40, "x")
	c.stop(0)
	return c.dirs[0], c.ca
}

func snapshotStateFile(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, snapshotsDir, "*", "state.bin"))
	if err != nil || len(m) != 1 {
		t.Fatalf("want one snapshot, found %v (%v)", m, err)
	}
	return m[0]
}

func TestCorruptDataDirRefusesToStart(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(t *testing.T, dir string) string // returns the damaged path
	}{
		{"raft.db truncated", func(t *testing.T, dir string) string {
			// Cut into the pages bbolt has used (the file may also hold
			// preallocated space, whose loss would harm nothing).
			p := filepath.Join(dir, raftDBFile)
			db, err := bolt.Open(p, 0o600, &bolt.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			var used int64
			_ = db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
			db.Close()
			if err := os.Truncate(p, used/2); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"raft.db empty", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, raftDBFile)
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"raft.db overwritten", func(t *testing.T, dir string) string {
			junk := make([]byte, 8192)
			for i := range junk {
				junk[i] = byte(i*7 + 3)
			}
			return overwriteStart(t, filepath.Join(dir, raftDBFile), junk)
		}},
		{"raft.db first meta page overwritten", func(t *testing.T, dir string) string {
			// bbolt opens the file from its second meta page; its own
			// check would then panic on the first.
			junk := make([]byte, os.Getpagesize())
			for i := range junk {
				junk[i] = 0xA5
			}
			return overwriteStart(t, filepath.Join(dir, raftDBFile), junk)
		}},
		{"snapshot state flipped", func(t *testing.T, dir string) string {
			p := snapshotStateFile(t, dir)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0xff
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return filepath.Dir(p)
		}},
		{"snapshot meta unreadable", func(t *testing.T, dir string) string {
			p := filepath.Join(filepath.Dir(snapshotStateFile(t, dir)), "meta.json")
			if err := os.WriteFile(p, []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
			return filepath.Dir(p)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, ca := seedDataDir(t)
			bad := tt.corrupt(t, dir)
			server, client := ca.tlsPair(t, "auditor", "hospital-a")
			n, err := New(Config{
				DataDir: dir, NodeID: "hospital-a", BindAddr: "127.0.0.1:0",
				ServerTLS: server, ClientTLS: client, StateMachine: newChainSM(),
				Logger: auditortest.Logger(t),
			})
			if err == nil {
				n.Close()
				t.Fatal("node started on a corrupted data directory")
			}
			var ce *CorruptDataError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v (%T), want *CorruptDataError", err, err)
			}
			if ce.Path != bad {
				t.Fatalf("error names %s, want %s", ce.Path, bad)
			}
		})
	}
}

func TestRestartFromIntactDataDir(t *testing.T) {
	dir, ca := seedDataDir(t)
	server, client := ca.tlsPair(t, "auditor", "hospital-a")
	sm := newChainSM()
	n, err := New(Config{
		DataDir: dir, NodeID: "hospital-a", BindAddr: "127.0.0.1:0", Bootstrap: true,
		ServerTLS: server, ClientTLS: client, StateMachine: sm, Logger: auditortest.Logger(t),
		Tuning: Tuning{HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// Bootstrap on existing state is a no-op, not an error.
	if err := n.Bootstrap(nil); err != nil {
		t.Fatal(err)
	}
	// The node's address changed (port 0), so as a one-node cluster it can
	// no longer elect itself; its state comes from its own disk.
	auditortest.WaitFor(t, 5*time.Second, "the snapshot and log to be replayed", func() bool {
		c, _, _ := sm.snapshotCount()
		return c >= 30
	})
	if sm.restores != 1 {
		t.Fatalf("restored %d snapshots, want 1", sm.restores)
	}
}

// overwriteStart writes junk over the start of the file at p and returns p.
func overwriteStart(t *testing.T, p string, junk []byte) string {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(junk, 0); err != nil {
		t.Fatal(err)
	}
	return p
}
