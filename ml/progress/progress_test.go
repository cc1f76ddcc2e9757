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
	var nilBar *Bar
	nilBar.Update("x", 1, 2, "u")
	nilBar.Done()
}
