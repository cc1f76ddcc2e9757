package raftnode

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestBoltStoreLogs(t *testing.T) {
	path := filepath.Join(t.TempDir(), raftDBFile)
	s, err := openBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if first, _ := s.FirstIndex(); first != 0 {
		t.Fatalf("empty store first index %d", first)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1 + i/5, Type: raft.LogCommand,
			Data: []byte{byte(i)}, Extensions: []byte("ext"), AppendedAt: time.Unix(100, int64(i))})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	if first, _ := s.FirstIndex(); first != 4 {
		t.Fatalf("first index %d, want 4", first)
	}
	if last, _ := s.LastIndex(); last != 10 {
		t.Fatalf("last index %d, want 10", last)
	}
	var got raft.Log
	if err := s.GetLog(2, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("deleted entry: %v", err)
	}
	if err := s.GetLog(7, &got); err != nil {
		t.Fatal(err)
	}
	w := logs[6]
	if got.Index != w.Index || got.Term != w.Term || got.Type != w.Type || !bytes.Equal(got.Data, w.Data) ||
		!bytes.Equal(got.Extensions, w.Extensions) || !got.AppendedAt.Equal(w.AppendedAt) {
		t.Fatalf("got %+v, want %+v", got, *w)
	}

	if _, err := s.Get([]byte("missing")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: %v (raft needs the text \"not found\")", err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Everything survives a reopen.
	s, err = openBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("term after reopen: %d, %v", v, err)
	}
	if last, _ := s.LastIndex(); last != 10 {
		t.Fatalf("last index after reopen %d", last)
	}
}

func TestLogEncodingRoundTrip(t *testing.T) {
	tests := []raft.Log{
		{},
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("cfg")},
		{Index: 1 << 60, Term: 1 << 40, Type: raft.LogCommand, Data: bytes.Repeat([]byte{9}, 1000), AppendedAt: time.Unix(1e9, 5)},
	}
	for _, l := range tests {
		var got raft.Log
		if err := decodeLog(encodeLog(&l), &got); err != nil {
			t.Fatal(err)
		}
		if got.Index != l.Index || got.Term != l.Term || got.Type != l.Type || !bytes.Equal(got.Data, l.Data) || !got.AppendedAt.Equal(l.AppendedAt) {
			t.Fatalf("got %+v, want %+v", got, l)
		}
		enc := encodeLog(&l)
		for cut := range len(enc) {
			if err := decodeLog(enc[:cut], &got); err == nil {
				t.Fatalf("decoded a log entry truncated to %d of %d bytes", cut, len(enc))
			}
		}
	}
}

func FuzzDecodeLog(f *testing.F) {
	f.Add(encodeLog(&raft.Log{Index: 3, Term: 2, Type: raft.LogCommand, Data: []byte("x")}))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var l raft.Log
		if err := decodeLog(b, &l); err != nil {
			return
		}
		var l2 raft.Log
		if err := decodeLog(encodeLog(&l), &l2); err != nil {
			t.Fatal(err)
		}
		if l2.Index != l.Index || l2.Term != l.Term || l2.Type != l.Type || !bytes.Equal(l2.Data, l.Data) ||
			!bytes.Equal(l2.Extensions, l.Extensions) || !l2.AppendedAt.Equal(l.AppendedAt) {
			t.Fatalf("entry does not round-trip: %+v vs %+v", l, l2)
		}
	})
}
