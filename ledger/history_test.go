package ledger

import (
	"errors"
	"reflect"
	"testing"
)

// goldenHistory returns the golden log, its entries and their spend
// history.
func goldenHistory(t *testing.T) (*fed, [][]byte, []SpendPoint) {
	t.Helper()
	f, entries := goldenEntries(t)
	h, err := SpendHistory(entries)
	if err != nil {
		t.Fatal(err)
	}
	return f, entries, h
}

func TestSpendHistory(t *testing.T) {
	f, entries, h := goldenHistory(t)
	// Three account openings, the charge to h1 and h3, and the session
	// opening for h1; the refused, duplicate and in-session entries add
	// nothing.
	want := []struct {
		index    uint64
		hospital string
	}{{1, "h1"}, {2, "h2"}, {3, "h3"}, {6, "h1"}, {6, "h3"}, {10, "h1"}}
	if len(h) != len(want) {
		t.Fatalf("%d points: %+v", len(h), h)
	}
	for i, w := range want {
		if h[i].Index != w.index || h[i].Hospital != w.hospital {
			t.Fatalf("point %d is entry %d %s, want entry %d %s", i, h[i].Index, h[i].Hospital, w.index, w.hospital)
		}
	}
	if h[0].Epsilon != 0 || !(h[3].Epsilon > 0) || !(h[5].Epsilon > h[3].Epsilon) {
		t.Fatalf("h1's ε does not grow: %v %v %v", h[0].Epsilon, h[3].Epsilon, h[5].Epsilon)
	}
	last, _ := f.st.Account("h1")
	if h[5].Epsilon != last.Epsilon {
		t.Fatalf("history ends at ε %v, the account is at %v", h[5].Epsilon, last.Epsilon)
	}
	entries[4] = entries[5]
	var re *ReplayError
	if _, err := SpendHistory(entries); !errors.As(err, &re) || re.Index != 4 {
		t.Fatalf("a broken log: %v", err)
	}
}

func TestSpendReplayFollowsAGrowingLog(t *testing.T) {
	_, entries, whole := goldenHistory(t)
	for _, cuts := range [][]int{{0}, {1, 5}, {3, 4, 7, 10}, {len(entries)}} {
		r := NewSpendReplay()
		var got []SpendPoint
		from := 0
		for _, to := range append(cuts, len(entries)) {
			ps, err := r.Append(entries[from:to])
			if err != nil {
				t.Fatalf("cuts %v: %v", cuts, err)
			}
			got, from = append(got, ps...), to
			if r.Len() != int64(to) {
				t.Fatalf("cuts %v: Len %d after %d entries", cuts, r.Len(), to)
			}
		}
		if !reflect.DeepEqual(got, whole) {
			t.Fatalf("cuts %v: %+v, want %+v", cuts, got, whole)
		}
	}
	// A broken entry stops the replay for good.
	r := NewSpendReplay()
	if _, err := r.Append(entries[:3]); err != nil {
		t.Fatal(err)
	}
	var re *ReplayError
	if _, err := r.Append(entries[4:]); !errors.As(err, &re) || re.Index != 3 {
		t.Fatalf("a missing entry: %v", err)
	}
	if _, err := r.Append(entries[3:]); !errors.As(err, &re) {
		t.Fatalf("after a failure: %v", err)
	}
}
