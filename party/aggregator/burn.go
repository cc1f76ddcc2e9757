package aggregator

import (
	"fmt"
	"maps"
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
// The marks are kept in the outbox, so that a restart does not forget
// them, and are the operator's alarm (log, nzc_aggregator_svt_sessions_
// burnt_total, nzc_aggregator_svt_blocked{hospital}, /readyz; the auditors'
// dashboard shows the burnt sessions from the ledger's session entries).
// The remedy is the federation administrator's signed suspension of the
// hospital that votes against the others (nzc init suspend, nzc ledger
// submit), which the ledger enforces and each batch's budget read leaves
// out, or the aggregator's own suspended list: a suspension lifts the
// marks of every burnt session that hospital was in.
type burns struct {
	minAnswers int // 0: none is burnt
	met        *metrics
	// store keeps the marks across restarts (Outbox.PutBurns): a restart
	// must not buy every marked hospital set another session.
	store *Outbox

	mu     sync.Mutex
	marked map[string]burnt // by hospital id
}

// burnt is the session that marked a hospital.
type burnt struct {
	session            string
	hospitals          []string
	answered, refusals int
}

// newBurns returns the marks store kept from earlier runs.
func newBurns(minAnswers int, met *metrics, store *Outbox) (*burns, error) {
	b := &burns{minAnswers: minAnswers, met: met, store: store, marked: map[string]burnt{}}
	marks, err := store.Burns()
	if err != nil {
		return nil, err
	}
	for _, m := range marks {
		b.marked[m.Hospital] = burnt{session: m.Session, hospitals: m.Hospitals, answered: m.Answered, refusals: m.Refusals}
		met.svtBlocked.WithLabelValues(m.Hospital).Set(1)
	}
	return b, nil
}

// save writes the marks; b.mu is held.
func (b *burns) save() error {
	marks := make([]BurnMark, 0, len(b.marked))
	for _, h := range slices.Sorted(maps.Keys(b.marked)) {
		r := b.marked[h]
		marks = append(marks, BurnMark{Hospital: h, Session: r.session, Hospitals: r.hospitals, Answered: r.answered, Refusals: r.refusals})
	}
	return b.store.PutBurns(marks)
}

// ended records that session, over hospitals, ended after answering
// answered queries and refusing refusals; it reports whether it burnt. The
// marks are written before it returns; an error is one writing them.
func (b *burns) ended(session string, hospitals []string, answered, refusals int) (bool, error) {
	if answered >= b.minAnswers {
		return false, nil
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
	if err := b.save(); err != nil {
		return true, fmt.Errorf("aggregator: record burnt session %s in the outbox: %w", session, err)
	}
	return true, nil
}

// lift removes the marks of every burnt session one of whose hospitals is
// now suspended (by the administrator in the ledger, or by the
// aggregator's operator): the next session leaves that hospital out, so the
// others may be asked again. It returns the hospitals whose marks it lifted.
func (b *burns) lift(suspended []string) ([]string, error) {
	if len(suspended) == 0 {
		return nil, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var lifted []string
	for _, h := range slices.Sorted(maps.Keys(b.marked)) {
		if slices.ContainsFunc(b.marked[h].hospitals, func(x string) bool { return slices.Contains(suspended, x) }) {
			delete(b.marked, h)
			b.met.svtBlocked.DeleteLabelValues(h)
			lifted = append(lifted, h)
		}
	}
	if len(lifted) == 0 {
		return nil, nil
	}
	if err := b.save(); err != nil {
		return lifted, fmt.Errorf("aggregator: record lifted burn marks in the outbox: %w", err)
	}
	return lifted, nil
}

// refuseOpen returns the refusal of a new session for hospitals when one
// of them is marked, nil otherwise.
func (b *burns) refuseOpen(hospitals []string) *protocol.Error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range hospitals {
		if r, ok := b.marked[h]; ok {
			return protocol.Errorf(protocol.CodeBudgetExhausted,
				"no nzc-svt session is opened for hospitals %s: %s was in session %s (hospitals %s), which refused its %d queries after answering %d, fewer than %d; one of those hospitals may be voting against the others, and another session would cost each of them its whole ε again. Nothing was charged or released. The federation's administrator suspends the hospital at fault (nzc init suspend, then nzc ledger submit), or the aggregator's operator lists it in suspended; the others are then asked again",
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
	return fmt.Sprintf("; no nzc-svt session opens for %s: a session of theirs refused its queries with fewer than %d answered (suspend the hospital at fault: nzc init suspend, nzc ledger submit)", strings.Join(ids, ", "), b.minAnswers)
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

// suspendedStatus names the suspended hospitals for a status line: the
// operator's, and those the last budget read found suspended in the
// ledger. a.mu is held.
func (a *Aggregator) suspendedStatus() string {
	s := ""
	if len(a.cfg.Suspended) > 0 {
		s += "; suspended by the operator: " + strings.Join(a.cfg.Suspended, ", ")
	}
	if len(a.suspendedInLedger) > 0 {
		s += "; suspended in the ledger by the federation's administrator: " + strings.Join(a.suspendedInLedger, ", ")
	}
	return s
}
