// Package progress draws a one-line progress report (what, how far, rate,
// time left) on a terminal. When the writer is not a terminal it draws
// nothing, so logs and pipes stay clean; a bar made by NewOrLog then logs
// the same report as a structured line at a steady interval instead, so
// that a service's journal shows a long run advancing.
package progress

import (
	"fmt"
	"io"
	"log/slog"
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
	// lines: when not drawing, write each step as a plain line.
	lines     bool
	lastLabel string
	lastDone  int
	// logging: when not drawing, log the latest state every interval.
	log       *slog.Logger
	total     int
	unit      string
	stopLog   chan struct{}
	loggerRan chan struct{}
}

// LogEvery is the interval at which a bar made by NewOrLog logs.
const LogEvery = 5 * time.Second

// NewOrLog is New, except that when w is not a terminal (a service under
// systemd, output to a file) the bar logs its state to log every interval,
// whether or not it advanced, as one structured line (msg "progress", with
// label, done, total, unit, percent, rate per second, elapsed and eta
// seconds), and once more at Done. Call Done to stop it. With a nil log it
// is New(w, now).
func NewOrLog(w io.Writer, now func() time.Time, log *slog.Logger, every time.Duration) *Bar {
	b := New(w, now)
	if b.enabled || log == nil {
		return b
	}
	b.log, b.stopLog, b.loggerRan = log, make(chan struct{}), make(chan struct{})
	stop := b.stopLog
	go func() {
		defer close(b.loggerRan)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				b.logState()
			case <-stop:
				return
			}
		}
	}()
	return b
}

// logState logs the latest update, if there was one.
func (b *Bar) logState() {
	b.mu.Lock()
	label, done, total, unit := b.lastLabel, b.lastDone, b.total, b.unit
	el := b.now().Sub(b.start)
	b.mu.Unlock()
	if label == "" {
		return
	}
	rate := 0.0
	if el > 0 {
		rate = float64(done) / el.Seconds()
	}
	attrs := []any{"label", label, "done", done, "total", total, "unit", unit, "elapsed_s", el.Round(time.Second).Seconds(), "rate_per_s", round2(rate)}
	if total > 0 {
		attrs = append(attrs, "percent", round2(100*float64(done)/float64(total)))
	}
	if rate > 0 && total >= done {
		attrs = append(attrs, "eta_s", (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second).Seconds())
	}
	b.log.Info("progress", attrs...)
}

func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

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

// NewOrLines is New, except that when w is not a terminal every update
// that changes the label or the count is written as a plain line (with the
// time elapsed), so that a log or a CI transcript shows where a long run
// is. It suits callers that update once per step, not once per sample.
func NewOrLines(w io.Writer, now func() time.Time) *Bar {
	b := New(w, now)
	b.lines = !b.enabled && w != nil
	b.lastDone = -1
	return b
}

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
	if b == nil {
		return
	}
	if !b.enabled {
		if b.log != nil {
			b.mu.Lock()
			b.lastLabel, b.lastDone, b.total, b.unit = label, done, total, unit
			b.mu.Unlock()
			return
		}
		b.line(label, done, total, unit)
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

// Done ends the line (or the logging, with a last line).
func (b *Bar) Done() {
	if b == nil {
		return
	}
	if b.log != nil {
		b.mu.Lock()
		stop := b.stopLog
		b.stopLog = nil
		b.mu.Unlock()
		if stop != nil {
			close(stop)
			<-b.loggerRan
			b.logState()
		}
		return
	}
	if !b.enabled {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
}

// line writes one step of a non-terminal run.
func (b *Bar) line(label string, done, total int, unit string) {
	if !b.lines {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if label == b.lastLabel && done == b.lastDone {
		return
	}
	b.lastLabel, b.lastDone = label, done
	fmt.Fprintf(b.w, "%s: %d of %d %s (%s elapsed)\n", label, done, total, unit, b.now().Sub(b.start).Round(time.Second))
}
