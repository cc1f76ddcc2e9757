package progress

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
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

// Not on a terminal, NewOrLog logs the state every interval, whether or not
// it advanced, and once more at Done; then nothing more.
func TestNewOrLogLogsSteadily(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		log := slog.New(slog.NewJSONHandler(&buf, nil))
		b := NewOrLog(&bytes.Buffer{}, nil, log, 10*time.Second)
		time.Sleep(15 * time.Second) // nothing updated yet: nothing logged
		b.Update("teacher 1/4", 100, 400, "samples")
		time.Sleep(20 * time.Second) // ticks at 20 s and 30 s
		b.Update("teacher 2/4", 200, 400, "samples")
		b.Done()
		time.Sleep(time.Minute)
		synctest.Wait()
		var lines []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("not a JSON line: %q", l)
			}
			lines = append(lines, m)
		}
		if len(lines) != 3 {
			t.Fatalf("logged %d lines, want 3 (two ticks and Done):\n%s", len(lines), buf.String())
		}
		for i, want := range []struct {
			label         string
			done, elapsed float64
		}{{"teacher 1/4", 100, 20}, {"teacher 1/4", 100, 30}, {"teacher 2/4", 200, 35}} {
			l := lines[i]
			if l["msg"] != "progress" || l["label"] != want.label || l["done"] != want.done || l["total"] != 400.0 || l["elapsed_s"] != want.elapsed {
				t.Errorf("line %d = %v, want %s %v/400 at %vs", i, l, want.label, want.done, want.elapsed)
			}
		}
		if lines[2]["percent"] != 50.0 {
			t.Errorf("last line's percent = %v, want 50", lines[2]["percent"])
		}
	})
}

// syncBuffer is a bytes.Buffer safe for the logging goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
