package aggregator

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nzcfed/nzc/internal/backoff"
)

// DefaultMissBackoff and DefaultMissBackoffMax are Config.MissBackoff's
// and Config.MissBackoffMax's defaults: a hospital that missed a batch
// deadline is left out for 5 s, then for twice as long after each probe it
// misses, at most 10 min.
const (
	DefaultMissBackoff    = 5 * time.Second
	DefaultMissBackoffMax = 10 * time.Minute
)

// standing is how a batch treats a hospital, decided from timing alone.
type standing int

const (
	// standingAsked: the hospital is asked and the batch waits for its
	// votes until the deadline.
	standingAsked standing = iota
	// standingProbe: the hospital's backing-off period is over; it is
	// asked, but the batch does not wait for it beyond the hospitals that
	// are waited for (see probeGrace). Votes in time restore it.
	standingProbe
	// standingBenched: the hospital missed a deadline and its
	// backing-off period is not over; it is not asked.
	standingBenched
)

// health tracks which hospitals missed a batch deadline, from timing
// alone: whether a hospital's votes arrived while the batch waited, never
// what they were. A hospital that misses is left out of the following
// batches for a backing-off period (backoff.Ceiling from Config.MissBackoff
// doubling to Config.MissBackoffMax), then probed: asked alongside a batch
// that does not wait for it. A probe answered in time restores it; a probe
// missed doubles the period. Its misses are forgotten once it has missed
// none for MissBackoffMax, so a hospital that alternates answering probes
// and stalling costs the others one deadline per period, and the periods
// grow to MissBackoffMax. Standings are kept by hospital id, so that
// reconnecting does not reset them.
type health struct {
	now    func() time.Time
	lo, hi time.Duration
	met    *metrics

	mu   sync.Mutex
	byID map[string]*hospitalHealth
}

type hospitalHealth struct {
	misses   int       // misses since the last time it was forgotten
	lastMiss time.Time // when it last missed
	until    time.Time // left out until then, probed after
	batch    string    // the batch whose deadline it last missed
	waited   time.Duration
	probing  bool // its period is over: the next batch probes it
}

func newHealth(now func() time.Time, lo, hi time.Duration, met *metrics) *health {
	return &health{now: now, lo: lo, hi: hi, met: met, byID: map[string]*hospitalHealth{}}
}

// standing returns how the next batch treats hospital id.
func (h *health) standing(id string) standing {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.byID[id]
	switch {
	case s == nil || s.until.IsZero():
		return standingAsked
	case h.now().Before(s.until):
		return standingBenched
	}
	if !s.probing {
		s.probing = true
		h.met.leftOutNow.WithLabelValues(id, leftOutMissed).Set(0)
		h.met.leftOutNow.WithLabelValues(id, leftOutProbing).Set(1)
	}
	return standingProbe
}

// answered records that hospital id's votes arrived in time.
func (h *health) answered(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.byID[id]
	if s == nil {
		return
	}
	if !s.until.IsZero() {
		s.until, s.probing = time.Time{}, false
		h.met.leftOutNow.DeleteLabelValues(id, leftOutMissed)
		h.met.leftOutNow.DeleteLabelValues(id, leftOutProbing)
	}
	if h.now().Sub(s.lastMiss) >= h.hi {
		delete(h.byID, id)
	}
}

// missed records that hospital id's votes for batch did not arrive in the
// time waited, and returns how long it is now left out. Misses of batches
// that ran at once count once.
func (h *health) missed(id, batch string, waited time.Duration) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.byID[id]
	now := h.now()
	if s != nil && now.Before(s.until) {
		// A batch asked before the hospital was left out (batches run
		// at once): its miss is the same one.
		return s.until.Sub(now)
	}
	if s == nil || now.Sub(s.lastMiss) >= h.hi && s.until.IsZero() {
		s = &hospitalHealth{}
		h.byID[id] = s
	}
	s.misses++
	d := backoff.Ceiling(s.misses, h.lo, h.hi)
	s.lastMiss, s.until, s.batch, s.waited, s.probing = now, now.Add(d), batch, waited, false
	h.met.missed.WithLabelValues(id).Inc()
	h.met.leftOutNow.DeleteLabelValues(id, leftOutProbing)
	h.met.leftOutNow.WithLabelValues(id, leftOutMissed).Set(1)
	return d
}

// The reasons of the nzc_aggregator_hospital_left_out gauge.
const (
	leftOutMissed  = "missed-deadline"
	leftOutProbing = "probing"
)

// leftOut describes, sorted by hospital, each hospital left out of the
// next batches or probed by them, and why.
func (h *health) leftOut() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	var out []string
	for id, s := range h.byID {
		if s.until.IsZero() {
			continue
		}
		why := fmt.Sprintf("%s missed the deadline of batch %s (waited %v; %d misses)", id, s.batch, s.waited.Round(time.Millisecond), s.misses)
		if now.Before(s.until) {
			why += fmt.Sprintf(", left out for %v more, then probed", s.until.Sub(now).Round(time.Second))
		} else {
			why += ", probed by the next batch, which does not wait for it"
		}
		out = append(out, why)
	}
	slices.Sort(out)
	return out
}

// describe is leftOut as one phrase for a status line, "" when none is.
func (h *health) describe() string {
	l := h.leftOut()
	if len(l) == 0 {
		return ""
	}
	return "; left out for missing deadlines: " + strings.Join(l, "; ")
}

// probeGraceFloor is the least probeGrace, when the deadline allows it.
const probeGraceFloor = 100 * time.Millisecond

// probeGrace is how long a batch waits for its probed hospitals once
// every hospital it waits for has answered (elapsed after the fan-out): a
// quarter as long again, at least probeGraceFloor or a twentieth of the
// deadline when that is shorter, and never past the deadline (remaining).
// A probed hospital that answers about as fast as the slowest of the
// others is thus counted, and one that stalls costs the batch at most this
// grace.
func probeGrace(elapsed, deadline, remaining time.Duration) time.Duration {
	return max(0, min(max(elapsed/4, min(probeGraceFloor, deadline/20)), remaining))
}

// triage decides from the hospitals' standings which of the connected
// hospitals hs a batch asks: those in good standing and those due a probe
// (named in probe), leaving out the benched ones (named with the reason in
// leftOut). When fewer than the quorum are in good standing the batch
// could not go on without the others, so every hospital is asked and
// waited for, as if none had missed a deadline.
func (a *Aggregator) triage(batch string, hs []*hospitalEntry) (ask []*hospitalEntry, probe map[string]bool, leftOut []string) {
	st := make([]standing, len(hs))
	good := 0
	for i, h := range hs {
		st[i] = a.health.standing(h.id)
		if st[i] == standingAsked {
			good++
		}
	}
	if good < a.cfg.Quorum {
		if good < len(hs) {
			a.log.Info("fewer hospitals than the quorum are in good standing; the batch asks and waits for every connected hospital", "batch", batch, "good", good, "quorum", a.cfg.Quorum)
		}
		return hs, nil, nil
	}
	for i, h := range hs {
		switch st[i] {
		case standingBenched:
			leftOut = append(leftOut, h.id)
			continue
		case standingProbe:
			if probe == nil {
				probe = map[string]bool{}
			}
			probe[h.id] = true
		}
		ask = append(ask, h)
	}
	if len(leftOut) > 0 {
		a.log.Info("hospitals left out of a batch for missing a deadline", "batch", batch, "left_out", a.health.leftOut())
	}
	return ask, probe, leftOut
}

// waitForProbes returns the probes the batch of hospitals hs (as admitted)
// may leave unwaited: none when the hospitals it waits for are fewer than
// the quorum, since the batch then needs the probed hospitals' votes.
func (a *Aggregator) waitForProbes(probe map[string]bool, hs []*hospitalEntry) map[string]bool {
	waited := 0
	for _, h := range hs {
		if !probe[h.id] {
			waited++
		}
	}
	if waited < a.cfg.Quorum {
		return nil
	}
	return probe
}
