package aggregator

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestOutbox(t *testing.T) {
	dir := t.TempDir()
	o, err := OpenOutbox(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Record{
		{BatchID: "bb", Student: "s", State: StatePending, SealedLabels: []byte("x")},
		{BatchID: "aa", Student: "s", State: StatePending},
		{BatchID: "cc", Student: "s", State: StateCommitted, LedgerIndex: 4},
	} {
		if err := o.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	p, err := o.Pending()
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 2 || p[0].BatchID != "aa" || p[1].BatchID != "bb" || string(p[1].SealedLabels) != "x" {
		t.Fatalf("pending = %+v, want aa and bb in order", p)
	}
	r, ok, err := o.Get("s", "cc")
	if err != nil || !ok || r.LedgerIndex != 4 {
		t.Fatalf("Get(cc) = %+v %v %v", r, ok, err)
	}
	if _, ok, err := o.Get("s", "dd"); ok || err != nil {
		t.Fatalf("Get of an unknown batch: %v %v", ok, err)
	}
	if err := o.Delete("s", "bb"); err != nil {
		t.Fatal(err)
	}
	if err := o.Delete("s", "bb"); err != nil {
		t.Fatalf("deleting twice: %v", err)
	}
	// A damaged record is an error, never an empty outbox: its batch may
	// be charged, and answering it afresh would release new noise.
	if err := os.WriteFile(o.path("s", "ee"), []byte(`{"version":1,"batch_id":"ee","state":"pen`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := o.Get("s", "ee"); !errors.Is(err, ErrCorruptOutbox) {
		t.Fatalf("damaged record: %v", err)
	}
	if _, err := o.Pending(); !errors.Is(err, ErrCorruptOutbox) {
		t.Fatalf("listing with a damaged record: %v", err)
	}
	// Temporary files of an interrupted write are ignored.
	if err := os.Remove(o.path("s", "ee")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".ff.json.tmp-1"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err := o.Pending(); err != nil || len(p) != 1 {
		t.Fatalf("pending with a temporary file: %v %v", p, err)
	}
}
