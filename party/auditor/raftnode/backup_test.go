package raftnode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSnapshotFileRoundTrip(t *testing.T) {
	f := SnapshotFile{State: []byte("state bytes"), Meta: SnapshotMeta{ID: "3-20-1", Node: "a", Index: 20, Term: 3,
		Peers: []Peer{{ID: "a", Addr: "127.0.0.1:1"}, {ID: "b", Addr: "127.0.0.1:2"}}, ConfigIndex: 4}}
	b, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	g, err := DecodeSnapshotFile(b)
	if err != nil || string(g.State) != "state bytes" || g.Meta.Index != 20 || len(g.Meta.Peers) != 2 || g.Meta.ConfigIndex != 4 {
		t.Fatalf("%+v %v", g, err)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		if _, err := DecodeSnapshotFile(c); !errors.Is(err, ErrSnapshotFile) {
			t.Fatalf("byte %d changed: %v", i, err)
		}
	}
	for _, n := range []int{0, 10, len(b) - 1} {
		if _, err := DecodeSnapshotFile(b[:n]); !errors.Is(err, ErrSnapshotFile) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
}

func FuzzDecodeSnapshotFile(f *testing.F) {
	b, _ := SnapshotFile{State: []byte("x"), Meta: SnapshotMeta{Index: 1, Peers: []Peer{{ID: "a", Addr: "b"}}}}.Encode()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSnapshotFile(b)
		if err != nil {
			return
		}
		if _, err := s.Encode(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSaveAndRestoreSnapshot takes a snapshot of a live cluster, restores it
// into a stopped member's data directory, and checks the member catches up
// from it to the same state as the others.
func TestSaveAndRestoreSnapshot(t *testing.T) {
	c := newTLSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for id := range uint64(20) {
		if _, _, err := submitRetry(ctx, c.nodes[id%3], chainCmd(id, "before")); err != nil {
			t.Fatal(err)
		}
	}
	c.waitConverged(10 * time.Second)
	f, err := c.nodes[1].SaveSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Meta.Node != c.ids(1) || f.Meta.Index == 0 || len(f.Meta.Peers) != 3 {
		t.Fatalf("snapshot meta %+v", f.Meta)
	}
	// Nothing new since: the same state at the same index again.
	again, err := c.nodes[1].SaveSnapshot(ctx)
	if err != nil || again.Meta.Index != f.Meta.Index || string(again.State) != string(f.State) {
		t.Fatalf("second snapshot %+v (%v), want the first %+v", again.Meta, err, f.Meta)
	}

	// A running node's data directory is refused.
	if _, err := RestoreDataDir(c.dirs[2], f, newChainSM()); err == nil || !strings.Contains(err.Error(), "stop the auditor") {
		t.Fatalf("restore over a running node: %v", err)
	}

	// Stop node 2, move on without it, restore it from the snapshot.
	c.stop(2)
	for id := uint64(20); id < 30; id++ {
		if _, _, err := submitRetry(ctx, c.nodes[id%2], chainCmd(id, "after")); err != nil {
			t.Fatal(err)
		}
	}
	// A state the state machine refuses changes nothing.
	bad := f
	bad.State = f.State[:len(f.State)-1]
	before, _ := os.ReadDir(c.dirs[2])
	if _, err := RestoreDataDir(c.dirs[2], bad, newChainSM()); err == nil || !strings.Contains(err.Error(), "nothing changed") {
		t.Fatalf("restore of a damaged state: %v", err)
	}
	if after, _ := os.ReadDir(c.dirs[2]); len(after) != len(before) {
		t.Fatalf("a refused restore changed %s", c.dirs[2])
	}

	res, err := RestoreDataDir(c.dirs[2], f, newChainSM())
	if err != nil {
		t.Fatal(err)
	}
	if res.Previous != c.dirs[2]+".replaced-1" || res.Index != f.Meta.Index {
		t.Fatalf("restore result %+v", res)
	}
	if _, err := os.Stat(filepath.Join(res.Previous, raftDBFile)); err != nil {
		t.Fatalf("the replaced data directory was not kept: %v", err)
	}
	store, err := openBoltStore(filepath.Join(c.dirs[2], raftDBFile))
	if err != nil {
		t.Fatal(err)
	}
	term, _ := store.GetUint64(keyCurrentTerm)
	_ = store.Close()
	if term < f.Meta.Term {
		t.Fatalf("restored term %d < the snapshot's %d", term, f.Meta.Term)
	}

	c.sms[2] = newChainSM()
	c.run(2, c.config(2, c.addrs[2], nil))
	c.waitConverged(20 * time.Second)
	if count, distinct, _ := c.sms[2].snapshotCount(); count != 30 || distinct != 30 {
		t.Fatalf("the restored node holds %d commands (%d distinct), want 30", count, distinct)
	}
}
