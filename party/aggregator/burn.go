package aggregator

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nzcfed/nzc/protocol"
)

// burns bounds what the votes of one hospital can cost the others under
// nzc-svt. A session's whole ε is paid by every hospital of its set when
// it opens, and it ends after its K refusals; a hospital whose teachers
// vote against the others' can make every query refused, so that each
// session ends at once with nothing answered, and the next is paid again.
// A session that ends having answered fewer than minAnswers queries is
// burnt; every hospital of a burnt session is marked, and no session is
// opened for a hospital set holding a marked hospital. The decision reads
// only released outputs — how many of the session's queries were answered
// and refused — so it costs no privacy (post-processing). Each hospital
// therefore pays for at most one burnt session: the one that marked it
// (and, with several students, the sessions already open for the others
// when it ended). Sessions already open go on: they are paid for.
//
// The marks are the operator's alarm (log, nzc_aggregator_svt_sessions_
// burnt_total, nzc_aggregator_svt_blocked{hospital}, /readyz): the remedy
// is to suspend the hospital that votes against the others (the
// aggregator's suspended list) and restart the aggregator, which clears
// the marks.
type burns struct {
	minAnswers int // 0: none is burnt
	met        *metrics

	mu     sync.Mutex
	marked map[string]burnt // by hospital id
}

// burnt is the session that marked a hospital.
type burnt struct {
	session            string
	hospitals          []string
	answered, refusals int
}

func newBurns(minAnswers int, met *metrics) *burns {
	return &burns{minAnswers: minAnswers, met: met, marked: map[string]burnt{}}
}

// ended records that session, over hospitals, ended after answering
// answered queries and refusing refusals; it reports whether it burnt.
func (b *burns) ended(session string, hospitals []string, answered, refusals int) bool {
	if answered >= b.minAnswers {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	rec := burnt{session: session, hospitals: slices.Clone(hospitals), answered: answered, refusals: refusals}
	b.met.svtBurnt.Inc()
	for _, h := range hospitals {
		if _, ok := b.marked[h]; !ok {
			b.marked[h] = rec
			b.met.svtBlocked.WithLabelValues(h).Set(1)
		}
	}
	return true
}

// refuseOpen returns the refusal of a new session for hospitals when one
// of them is marked, nil otherwise.
func (b *burns) refuseOpen(hospitals []string) *protocol.Error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range hospitals {
		if r, ok := b.marked[h]; ok {
			return protocol.Errorf(protocol.CodeBudgetExhausted,
				"no nzc-svt session is opened for hospitals %s: %s was in session %s (hospitals %s), which refused its %d queries after answering %d, fewer than %d; one of those hospitals may be voting against the others, and another session would cost each of them its whole ε again. Nothing was charged or released. The aggregator's operator suspends the hospital at fault (suspended in its configuration) and restarts it",
				strings.Join(hospitals, ", "), h, r.session, strings.Join(r.hospitals, ", "), r.refusals, r.answered, b.minAnswers)
		}
	}
	return nil
}

// describe is the marks as one phrase for a status line, "" when none.
func (b *burns) describe() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.marked) == 0 {
		return ""
	}
	ids := make([]string, 0, len(b.marked))
	for h := range b.marked {
		ids = append(ids, h)
	}
	slices.Sort(ids)
	return fmt.Sprintf("; no nzc-svt session opens for %s: a session of theirs refused its queries with fewer than %d answered (suspend the hospital at fault and restart)", strings.Join(ids, ", "), b.minAnswers)
}

func newBurnMetrics() (prometheus.Counter, *prometheus.GaugeVec) {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "nzc_aggregator_svt_sessions_burnt_total",
			Help: "nzc-svt sessions that refused their K queries having answered fewer than svt_min_answers; their hospitals get no new session."}),
		prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nzc_aggregator_svt_blocked",
			Help: "1 for each hospital no nzc-svt session opens for, after a session of it burnt."}, []string{"hospital"})
}

// unsuspended returns hs without the hospitals the operator suspended, and
// those, each with the reason.
func (a *Aggregator) unsuspended(hs []*hospitalEntry) (keep []*hospitalEntry, left []string) {
	for _, h := range hs {
		if slices.Contains(a.cfg.Suspended, h.id) {
			left = append(left, h.id)
			continue
		}
		keep = append(keep, h)
	}
	return keep, left
}

// suspendedStatus names the suspended hospitals for a status line.
func (a *Aggregator) suspendedStatus() string {
	if len(a.cfg.Suspended) == 0 {
		return ""
	}
	return "; suspended by the operator: " + strings.Join(a.cfg.Suspended, ", ")
}
