// Package progress draws a one-line progress report (what, how far, rate,
// time left) on a terminal. It draws nothing when the writer is not a
// terminal, so logs and pipes stay clean.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Bar is a progress line. Its methods are safe for concurrent use and do
// nothing on a nil or disabled Bar.
type Bar struct {
	w       io.Writer
	now     func() time.Time
	mu      sync.Mutex
	start   time.Time
	last    time.Time
	drawn   bool
	enabled bool
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// New returns a bar drawing on w if w is a terminal, and a disabled bar
// otherwise. now is the clock (time.Now when nil).
func New(w io.Writer, now func() time.Time) *Bar {
	return newBar(w, now, IsTerminal(w))
}

// Force returns a bar that draws on w whether or not it is a terminal (for tests).
func Force(w io.Writer, now func() time.Time) *Bar { return newBar(w, now, true) }

func newBar(w io.Writer, now func() time.Time, enabled bool) *Bar {
	if now == nil {
		now = time.Now
	}
	return &Bar{w: w, now: now, start: now(), enabled: enabled && w != nil}
}

// Update redraws the line (at most ten times a second, and always when done
// reaches total): label, done/total units, the rate since the bar started
// and the estimated time left.
func (b *Bar) Update(label string, done, total int, unit string) {
	if b == nil || !b.enabled {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.now()
	if done < total && t.Sub(b.last) < 100*time.Millisecond {
		return
	}
	b.last = t
	el := t.Sub(b.start).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(done) / el
	}
	eta := "?"
	if rate > 0 && total >= done {
		eta = time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	frac := 0.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	const width = 20
	fill := min(width, int(frac*width))
	fmt.Fprintf(b.w, "\r\x1b[K%s [%s%s] %3.0f%% %.0f %s/s ETA %s",
		label, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), 100*frac, rate, unit, eta)
	b.drawn = true
}

// Done ends the line.
func (b *Bar) Done() {
	if b == nil || !b.enabled {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
}
