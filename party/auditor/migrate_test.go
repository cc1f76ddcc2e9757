package auditor

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// untar extracts a gzipped tar of regular files and directories into dir.
func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: unexpected tar entry type %c", h.Name, h.Typeflag)
		}
	}
}

// An auditor whose data directory was written before the ledger's history
// moved to its own file — testdata/datadir-v1.tar.gz: a raft log and a
// snapshot holding every entry, made by a one-auditor cluster that applied
// a genesis, an account, ten charges and a refusal, with a snapshot after
// the refusal — starts with every entry, writes them to its history file,
// and finds them there after a restart.
func TestUpgradeKeepsEveryEntry(t *testing.T) {
	var want struct {
		Size    int64    `json:"size"`
		Root    string   `json:"root"`
		Entries [][]byte `json:"entries"`
	}
	b, err := os.ReadFile(filepath.Join("testdata", "datadir-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	untar(t, filepath.Join("testdata", "datadir-v1.tar.gz"), dir)
	now := time.Now()
	ca, err := crypto.NewCA(rand.Reader, "test federation", now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, ca: ca}
	for round := range 2 {
		cfg := c.config("a1")
		cfg.DataDir, cfg.Bootstrap = filepath.Join(dir, "a1"), true
		a := c.start(cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := a.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		st := a.Ledger().State()
		auditortest.WaitFor(t, 15*time.Second, "the log replayed", func() bool { return st.TreeSize() >= want.Size })
		if st.TreeSize() != want.Size || st.RootHash().String() != want.Root {
			t.Fatalf("round %d: %d entries, root %s; want %d, %s", round, st.TreeSize(), st.RootHash(), want.Size, want.Root)
		}
		got, err := st.Entries(0, want.Size)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if !bytes.Equal(got[i], want.Entries[i]) {
				t.Fatalf("round %d: entry %d differs", round, i)
			}
		}
		if err := c.stop[round](); err != nil {
			t.Fatal(err)
		}
		h, err := raftnode.OpenHistory(filepath.Join(cfg.DataDir, historyFile))
		if err != nil {
			t.Fatal(err)
		}
		if h.Len() != want.Size {
			t.Errorf("round %d: history.db holds %d entries, want %d", round, h.Len(), want.Size)
		}
		last, err := h.Entry(want.Size - 1)
		if err != nil || !bytes.Equal(last, want.Entries[want.Size-1]) {
			t.Errorf("round %d: history.db's last entry: %v", round, err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

var updateDataDir = flag.Bool("update-datadir", false, "write testdata/datadir-v2.* again, with the data directory format before state snapshots")

// writeDataDirV2 writes testdata/datadir-v2.tar.gz and .json: the data
// directory of a one-auditor cluster in the format before state
// snapshots — raft.db, history.db and a raft snapshot holding every entry
// (ledger.State.Snapshot) — after a genesis, an account, twelve charges
// and a refusal, with the snapshot after the eighth charge, so that the
// raft log holds commands after it.
func writeDataDirV2(t *testing.T) {
	now := time.Now()
	ca, err := crypto.NewCA(rand.Reader, "test federation", now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := &testCluster{t: t, ca: ca}
	cfg := c.config("a1")
	cfg.DataDir, cfg.Bootstrap, cfg.Genesis = filepath.Join(dir, "a1"), true, testGenesis(t, []string{"a1"})
	a := c.start(cfg)
	a.ledger.snapshot = a.ledger.state.Snapshot // the format before state snapshots
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := a.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if r := submitTo(ctx, t, a, &ledger.OpenAccount{Hospital: "h1", CapEpsilon: 8, CapDelta: 1e-5, Timestamp: time.Now().UnixNano()}, "h1"); r.Status != ledger.StatusAccepted {
		t.Fatalf("account: %s %s", r.Status, r.Message)
	}
	for i := range 12 {
		if r := submitTo(ctx, t, a, fixtureCharge(i), "agg"); r.Status != ledger.StatusAccepted {
			t.Fatalf("charge %d: %s %s", i, r.Status, r.Message)
		}
		if i == 7 {
			if _, err := a.Node().SaveSnapshot(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, err := a.Node().Submit(ctx, []byte("not a command")); err == nil {
		t.Log("the refusal was proposed")
	}
	st := a.Ledger().State()
	entries, err := st.Entries(0, st.TreeSize())
	if err != nil {
		t.Fatal(err)
	}
	want := struct {
		Size    int64    `json:"size"`
		Root    string   `json:"root"`
		Entries [][]byte `json:"entries"`
	}{st.TreeSize(), st.RootHash().String(), entries}
	if err := c.stop[0](); err != nil {
		t.Fatal(err)
	}
	js, err := json.MarshalIndent(want, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "datadir-v2.json"), append(js, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o700, Typeflag: tar.TypeDir}
		var b []byte
		if !d.IsDir() {
			if b, err = os.ReadFile(path); err != nil {
				return err
			}
			h.Mode, h.Typeflag, h.Size = 0o600, tar.TypeReg, int64(len(b))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "datadir-v2.tar.gz"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixtureCharge is charge i of testdata/datadir-v2.
func fixtureCharge(i int) *ledger.Charge {
	batch := fmt.Sprintf("batch-%d", i)
	return &ledger.Charge{BatchID: batch, Student: "s1", Hospitals: []string{"h1"}, Mechanism: "gnmax",
		Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 400}.LedgerParams(), Queries: 1, Answers: 1,
		Curve: mechanism.Gaussian(mechanism.DefaultGrid(), math.Sqrt2, 400).Values(), AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: int64(10 + i)}
}

// An auditor whose data directory holds the format before state
// snapshots — testdata/datadir-v2.tar.gz (see writeDataDirV2): history.db
// and a raft snapshot holding every entry — starts with every entry, and
// after a state snapshot of its own and a restart still holds them all,
// having restored that snapshot over its history without replaying it.
func TestUpgradeFromEntriesSnapshotsKeepsEveryEntry(t *testing.T) {
	if *updateDataDir {
		writeDataDirV2(t)
	}
	var want struct {
		Size    int64    `json:"size"`
		Root    string   `json:"root"`
		Entries [][]byte `json:"entries"`
	}
	b, err := os.ReadFile(filepath.Join("testdata", "datadir-v2.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	untar(t, filepath.Join("testdata", "datadir-v2.tar.gz"), dir)
	snaps, err := filepath.Glob(filepath.Join(dir, "a1", "snapshots", "*", "state.bin"))
	if err != nil || len(snaps) != 1 {
		t.Fatalf("the fixture holds snapshots %v (%v), want one", snaps, err)
	}
	if old, err := os.ReadFile(snaps[0]); err != nil || len(old) < 2 || old[1] != 'S' {
		t.Fatalf("the fixture's snapshot is not an entries snapshot (%v)", err)
	}
	now := time.Now()
	ca, err := crypto.NewCA(rand.Reader, "test federation", now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, ca: ca}
	for round := range 2 {
		cfg := c.config("a1")
		cfg.DataDir, cfg.Bootstrap = filepath.Join(dir, "a1"), true
		a := c.start(cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := a.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		st := a.Ledger().State()
		auditortest.WaitFor(t, 15*time.Second, "the log replayed", func() bool { return st.TreeSize() >= want.Size })
		if st.TreeSize() != want.Size || st.RootHash().String() != want.Root {
			t.Fatalf("round %d: %d entries, root %s; want %d, %s", round, st.TreeSize(), st.RootHash(), want.Size, want.Root)
		}
		got, err := st.Entries(0, want.Size)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if !bytes.Equal(got[i], want.Entries[i]) {
				t.Fatalf("round %d: entry %d differs", round, i)
			}
		}
		// The batches charged before the upgrade, in the old snapshot
		// (batch 0) and after it (batch 11), are still known: the
		// history now keeps them.
		for _, i := range []int{0, 11} {
			if r := st.Check(signed(t, fixtureCharge(i), "agg")); r.Status != ledger.StatusDuplicate {
				t.Fatalf("round %d: batch %d again: %s/%s, want a duplicate", round, i, r.Status, r.Code)
			}
		}
		if round == 0 {
			// A snapshot now is a state snapshot, which the next start
			// restores over history.db; a backup of it holds every entry.
			f, err := a.Node().SaveSnapshot(ctx)
			if err != nil || len(f.State) < 2 || f.State[1] != 'S' {
				t.Fatalf("the backup after the upgrade: %v", err)
			}
			kept, _ := filepath.Glob(filepath.Join(cfg.DataDir, "snapshots", "*", "state.bin"))
			states := 0
			for _, p := range kept {
				if b, err := os.ReadFile(p); err == nil && len(b) > 1 && b[1] == 'T' {
					states++
				}
			}
			if states != 1 {
				t.Fatalf("%d state snapshots among %v, want one", states, kept)
			}
		}
		cancel()
		if err := c.stop[round](); err != nil {
			t.Fatal(err)
		}
	}
}
