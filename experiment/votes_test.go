package experiment

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"
)

func TestVotesRoundTrip(t *testing.T) {
	preds := [][]int{{0, 1, 2, 9}, {9, 9, 0, 3}, {1, 1, 1, 1}}
	path := filepath.Join(t.TempDir(), "v.bin")
	if err := saveVotes(path, preds); err != nil {
		t.Fatal(err)
	}
	got := loadVotes(path, 10, 3, 4)
	if len(got) != 3 {
		t.Fatalf("loaded %v", got)
	}
	for i := range preds {
		if !slices.Equal(got[i], preds[i]) {
			t.Fatalf("teacher %d: %v, want %v", i, got[i], preds[i])
		}
	}
	// A file for another ensemble, data set or class count is not used.
	for _, c := range []struct{ classes, teachers, examples int }{{9, 3, 4}, {10, 4, 4}, {10, 3, 5}} {
		if p := loadVotes(path, c.classes, c.teachers, c.examples); p != nil {
			t.Fatalf("%+v: loaded %v, want nothing", c, p)
		}
	}
	if p := loadVotes(filepath.Join(t.TempDir(), "none"), 10, 3, 4); p != nil {
		t.Fatal("a missing file loaded")
	}
}

func TestDecodeVotesRejects(t *testing.T) {
	var good bytes.Buffer
	if err := encodeVotes(&good, [][]int{{1, 2}, {3, 4}}); err != nil {
		t.Fatal(err)
	}
	b := good.Bytes()
	version := slices.Clone(b)
	version[len(votesMagic)] = 2
	tests := map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("NZCVOTEX"), b[8:]...),
		"version":   version,
		"truncated": b[:len(b)-1],
		"long":      append(slices.Clone(b), 0),
	}
	for name, in := range tests {
		if _, err := decodeVotes(in, 10); !errors.Is(err, errVotesFormat) {
			t.Errorf("%s: %v, want errVotesFormat", name, err)
		}
	}
	if _, err := decodeVotes(b, 4); !errors.Is(err, errVotesFormat) {
		t.Errorf("class 4 of 4: %v, want errVotesFormat", err)
	}
	if err := encodeVotes(&bytes.Buffer{}, [][]int{{1}, {1, 2}}); !errors.Is(err, errVotesFormat) {
		t.Errorf("ragged: %v, want errVotesFormat", err)
	}
}

func FuzzDecodeVotes(f *testing.F) {
	var b bytes.Buffer
	_ = encodeVotes(&b, [][]int{{1, 2, 3}, {0, 0, 9}})
	f.Add(b.Bytes())
	f.Add([]byte(votesMagic))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := decodeVotes(in, 10)
		if err != nil {
			return
		}
		var again bytes.Buffer
		if err := encodeVotes(&again, p); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.Bytes(), in) {
			t.Fatal("decode then encode changed the bytes")
		}
	})
}
