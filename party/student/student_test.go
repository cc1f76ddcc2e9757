package student

import (
	"bytes"
	"testing"
)

func TestBatchIDIsDeterministicAndDistinct(t *testing.T) {
	a := BatchID("student-1", "abc", 8, 0)
	if !bytes.Equal(a, BatchID("student-1", "abc", 8, 0)) {
		t.Fatal("the same batch got two ids: a resumed run would pay twice")
	}
	if len(a) < 16 || len(a) > 64 {
		t.Fatalf("batch id of %d bytes is outside the protocol's 16 to 64", len(a))
	}
	seen := map[string]bool{string(a): true}
	for _, b := range [][]byte{
		BatchID("student-2", "abc", 8, 0), BatchID("student-1", "abd", 8, 0),
		BatchID("student-1", "abc", 9, 0), BatchID("student-1", "abc", 8, 1),
	} {
		if seen[string(b)] {
			t.Fatal("two different batches share an id")
		}
		seen[string(b)] = true
	}
}
