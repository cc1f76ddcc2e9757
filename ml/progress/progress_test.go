package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestBar(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	b := Force(&buf, clock)
	now = now.Add(10 * time.Second)
	b.Update("teacher 3/10", 100, 400, "samples")
	b.Done()
	got := buf.String()
	for _, want := range []string{"teacher 3/10", " 25%", "10 samples/s", "ETA 30s"} {
		if !strings.Contains(got, want) {
			t.Errorf("output %q lacks %q", got, want)
		}
	}
	// Not a terminal: nothing is drawn.
	buf.Reset()
	quiet := New(&buf, clock)
	quiet.Update("x", 1, 2, "u")
	quiet.Done()
	if buf.Len() != 0 {
		t.Fatalf("drew %q on a non-terminal", buf.String())
	}
	// Not a terminal, in lines mode: one plain line per step, repeats
	// skipped.
	buf.Reset()
	lines := NewOrLines(&buf, clock)
	now = now.Add(90 * time.Second)
	lines.Update("ledger", 1, 5, "reps")
	lines.Update("ledger", 1, 5, "reps")
	lines.Update("ledger", 2, 5, "reps")
	lines.Update("e2e", 2, 5, "reps")
	lines.Done()
	want := "ledger: 1 of 5 reps (1m30s elapsed)\nledger: 2 of 5 reps (1m30s elapsed)\ne2e: 2 of 5 reps (1m30s elapsed)\n"
	if buf.String() != want {
		t.Fatalf("lines mode wrote %q, want %q", buf.String(), want)
	}
	var nilBar *Bar
	nilBar.Update("x", 1, 2, "u")
	nilBar.Done()
}
