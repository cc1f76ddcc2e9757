package auditor

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
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
