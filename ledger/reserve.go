package ledger

import (
	"math"
	"slices"

	"github.com/nzcfed/nzc/mechanism"
)

// reservation is a live Reserve: the worst case it holds (cost.admit*)
// and what a charge settling within it must match.
type reservation struct {
	digest    [32]byte
	index     uint64
	student   string
	hospitals []string
	mechanism string
	queries   uint64
	cost      derived
}

// queued is a reservation's place in the log order.
type queued struct {
	key   string
	index uint64
}

// live reports whether r still holds its cost when the entry at index is
// decided.
func (r *reservation) live(index uint64) bool { return index < r.index+ReservationWindow }

// liveReservation returns the reservation of batch key that holds at
// index, if any.
func (s *State) liveReservation(key string, index uint64) (*reservation, bool) {
	r, ok := s.reservations[key]
	if !ok || !r.live(index) {
		return nil, false
	}
	return r, true
}

// reserved composes, in log order, the worst cases of the reservations
// live at index that name hospital h, of student when it is not "",
// except batch except's: what the gate counts as spent beside the account
// itself (or beside the student's usage of it).
func (s *State) reserved(h, student string, index uint64, except string) (curve mechanism.Curve, delta, pure float64) {
	curve = s.grid.Zero()
	for _, q := range s.reserveQueue {
		r, ok := s.reservations[q.key]
		if !ok || r.index != q.index || !r.live(index) || q.key == except || !slices.Contains(r.hospitals, h) || student != "" && r.student != student {
			continue
		}
		curve, _ = curve.Compose(r.cost.admit) // same grid
		delta += r.cost.admitDelta
		pure = addPure(pure, r.cost.admitPure)
	}
	return curve, delta, pure
}

// reservedAnswers sums the queries of student's reservations live at
// index, except batch except's: the answers they hold against its quota.
// It saturates rather than wraps (each sum was admitted under the quota,
// so it does not in practice).
func (s *State) reservedAnswers(student string, index uint64, except string) uint64 {
	var held uint64
	for _, q := range s.reserveQueue {
		r, ok := s.reservations[q.key]
		if !ok || r.index != q.index || !r.live(index) || q.key == except || r.student != student {
			continue
		}
		if held > math.MaxUint64-r.queries {
			return math.MaxUint64
		}
		held += r.queries
	}
	return held
}

// pruneReservations forgets the reservations that no entry from next on
// can see live, oldest first, and the queue places of those settled or
// replaced.
func (s *State) pruneReservations(next uint64) {
	n := 0
	for _, q := range s.reserveQueue {
		r, ok := s.reservations[q.key]
		switch {
		case ok && r.index == q.index && r.live(next):
			// Still held. The queue is in log order, so every later
			// place is live too (or settled, pruned below once older).
		case ok && r.index == q.index:
			delete(s.reservations, q.key)
			n++
			continue
		default:
			n++ // settled or replaced
			continue
		}
		break
	}
	if n > 0 {
		s.reserveQueue = slices.Delete(s.reserveQueue, 0, n)
	}
}

func (s *State) reserve(c Command, signer Party, b *Reserve, index uint64) (Result, func()) {
	if signer.Role != RoleAggregator {
		return refuse(CodeWrongSigner, signer.ID, "only an aggregator reserves, %s is a %s", signer.ID, signer.Role), nil
	}
	digest, _ := c.Digest()
	key := b.key()
	if r, ok := s.liveReservation(key, index); ok && r.digest == digest {
		return Result{Outcome: Outcome{Status: StatusDuplicate, Original: r.index},
			Message: "batch " + b.BatchID + " is already reserved by this command; nothing held again"}, nil
	}
	if prev, ok := s.chargedBatch(key); ok {
		return refuse(CodeConflict, b.BatchID, "batch %s was charged at entry %d; a charged batch needs no reservation", b.BatchID, prev.index), nil
	}
	if b.Queries == 0 {
		return refuse(CodeBadCharge, b.BatchID, "batch %s: a reservation of no queries", b.BatchID), nil
	}
	if r, ok := s.studentQuota(b.Student, b.Queries, index, key); !ok {
		return r, nil
	}
	r, stated, ok := s.checkCost(b.Student, b.Hospitals, b.Curve, b.Delta)
	if !ok {
		return r, nil
	}
	// The worst case is the charge of every query answered.
	cost, inSession, r, ok := deriveReserve(s.grid, s.costs, b, stated)
	if !ok {
		return r, nil
	}
	if inSession {
		return accept("reserved batch %s (%d queries) against student %s's quota; its session paid its cost", b.BatchID, b.Queries, b.Student), s.hold(b, digest, key, index, cost)
	}
	if r, ok := s.capCheck(b.Student, b.Hospitals, cost, index, key); !ok {
		return r, nil
	}
	return accept("reserved the worst case of batch %s (%d queries) against %d hospitals", b.BatchID, b.Queries, len(b.Hospitals)), s.hold(b, digest, key, index, cost)
}

// hold returns the change that records reservation b, decided at index.
func (s *State) hold(b *Reserve, digest [32]byte, key string, index uint64, cost derived) func() {
	return func() {
		s.reservations[key] = &reservation{digest: digest, index: index, student: b.Student, hospitals: slices.Clone(b.Hospitals),
			mechanism: b.Mechanism, queries: b.Queries, cost: cost}
		s.reserveQueue = append(s.reserveQueue, queued{key: key, index: index})
	}
}

// within reports whether a charge of cost settles within reservation r:
// of r's student and mechanism, of hospitals r names, of at most its
// queries, and at every order, in δ and in pure ε, of no more than r holds.
func (r *reservation) within(b *Charge, cost derived) bool {
	if b.Student != r.student || b.Mechanism != r.mechanism || b.Queries > r.queries {
		return false
	}
	for _, h := range b.Hospitals {
		if !slices.Contains(r.hospitals, h) {
			return false
		}
	}
	for i := range cost.admit.Grid().Len() {
		if cost.admit.At(i) > r.cost.admit.At(i) {
			return false
		}
	}
	return cost.admitDelta <= r.cost.admitDelta && cost.admitPure <= r.cost.admitPure
}
