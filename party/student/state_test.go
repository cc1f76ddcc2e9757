package student

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/protocol"
)

const stateHash = "0123456789abcdef0123456789abcdef"

func stateClient(t testing.TB) *Client {
	return &Client{cfg: Config{StateDir: t.TempDir()}}
}

func writeState(t testing.TB, c *Client, index int, b []byte) string {
	p := c.statePath(stateHash, index)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func goodBatch(index, from int) Batch {
	return Batch{Index: index, BatchID: hex.EncodeToString(BatchID("s", stateHash, 4, index)), From: from,
		Labels: []int32{0, 2, -1, 1}, AnswersHash: "ab"}
}

// A damaged or foreign state file is refused with an error naming it, and
// left as it is: its labels would otherwise land on other queries (or, with
// more labels than the batch has queries, past the end of the data set).
func TestLoadBatchRefusesDamagedState(t *testing.T) {
	enc := func(b Batch) []byte { j, _ := json.Marshal(b); return j }
	good := goodBatch(2, 8)
	for _, tc := range []struct {
		name  string
		file  []byte
		valid bool
	}{
		{"the batch's own record", enc(good), true},
		{"not JSON", []byte("{\"index\": 2, \"labels\": [0,"), false},
		{"empty", nil, false},
		{"another batch's id", enc(func() Batch { b := good; b.BatchID = goodBatch(3, 12).BatchID; return b }()), false},
		{"another index", enc(func() Batch { b := good; b.Index = 3; return b }()), false},
		{"another offset", enc(func() Batch { b := good; b.From = 0; return b }()), false},
		{"more labels than queries", enc(func() Batch { b := good; b.Labels = append(b.Labels, 0, 0, 0, 0, 0); return b }()), false},
		{"fewer labels than queries", enc(func() Batch { b := good; b.Labels = b.Labels[:2]; return b }()), false},
		{"a label past any class", enc(func() Batch { b := good; b.Labels = []int32{0, protocol.MaxClasses, 0, 0}; return b }()), false},
		{"a negative label other than a refusal", enc(func() Batch { b := good; b.Labels = []int32{0, -2, 0, 0}; return b }()), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := stateClient(t)
			p := writeState(t, c, 2, tc.file)
			bt, err := c.loadBatch(stateHash, 2, BatchID("s", stateHash, 4, 2), 8, 4)
			if tc.valid {
				if err != nil || bt == nil || len(bt.Labels) != 4 {
					t.Fatalf("the batch's own record: %+v, %v", bt, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("loaded %+v", bt)
			}
			if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "damaged") {
				t.Fatalf("error %q does not name the damaged file %s", err, p)
			}
			if after, _ := os.ReadFile(p); !bytes.Equal(after, tc.file) {
				t.Fatal("the state file was changed")
			}
		})
	}
}

// FuzzLoadBatch: whatever a state file holds, loadBatch returns nothing (no
// file), an error, or exactly the batch asked for.
func FuzzLoadBatch(f *testing.F) {
	good, _ := json.Marshal(goodBatch(2, 8))
	f.Add(good)
	f.Add([]byte(`{"index":2,"batch_id":"","from":8,"labels":[0,0,0,0,0,0,0,0,0,0,0,0,0]}`))
	f.Add([]byte(`{"labels":null}`))
	c := stateClient(f) // its state file is rewritten for each input
	f.Fuzz(func(t *testing.T, file []byte) {
		writeState(t, c, 2, file)
		bt, err := c.loadBatch(stateHash, 2, BatchID("s", stateHash, 4, 2), 8, 4)
		if err != nil {
			return
		}
		if bt == nil || bt.Index != 2 || bt.From != 8 || len(bt.Labels) != 4 || !validLabels(bt.Labels, protocol.MaxClasses) {
			t.Fatalf("loaded a record that is not batch 2: %+v", bt)
		}
	})
}

// A damaged record of a bootstrapped run's second order is refused with an
// error naming it, before anything is asked or ranked again, and left as it
// is: asking another order would pay again for queries already asked.
func TestBootstrapRefusesDamagedRecord(t *testing.T) {
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	d := &data.Dataset{X: []float32{0, 1, 2, 3}, Y: make([]int, 4), Shape: data.Shape{Height: 1, Width: 1, Channels: 1}, Classes: 2}
	enc := func(r bootstrapRecord) []byte { j, _ := json.Marshal(r); return j }
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"not JSON", []byte(`{"asked": 2, "order": [3,`)},
		{"nothing asked first", enc(bootstrapRecord{Asked: 0, Order: []int{2, 3}})},
		{"more asked than queries", enc(bootstrapRecord{Asked: 5, Order: []int{2, 3}})},
		{"a query twice", enc(bootstrapRecord{Asked: 2, Order: []int{3, 3}})},
		{"a query past the data", enc(bootstrapRecord{Asked: 2, Order: []int{2, 4}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{ID: "s1", Identity: id, Hospitals: []*crypto.Recipient{id.Recipient()}, BatchSize: 2, StateDir: t.TempDir(),
				AuditorKeys: []string{"a1+f853fd16+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"}, Aggregator: "127.0.0.1:1", Bootstrap: 1,
				Rank: func(context.Context, *data.Dataset, []int, []bool) ([]int, error) {
					t.Error("ranked again over a damaged record")
					return nil, nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			hash := FeatureHash(d)
			p := c.bootstrapPath(hash, hash)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			res, err := c.Label(t.Context(), d, nil)
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "damaged") {
				t.Fatalf("Label: %+v, %v; want an error naming the damaged %s", res, err, p)
			}
			if after, _ := os.ReadFile(p); !bytes.Equal(after, tc.file) {
				t.Fatal("the record was changed")
			}
		})
	}
}
