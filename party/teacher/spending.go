package teacher

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// DefaultProofLag is how many batches a hospital votes on without having
// seen the proof of their charge before it stops voting.
const DefaultProofLag = 64

// Spending is what a hospital's own record of its votes shows: the batches
// it voted on, how many of them it has seen charged to it with a
// majority's proof, and whether it has stopped voting for want of proofs.
type Spending struct {
	Checked  bool   `json:"checked"` // false when no auditor keys are configured
	Voted    int64  `json:"voted"`
	Proven   int64  `json:"proven"`
	Unproven int    `json:"unproven"`
	Rejected int64  `json:"rejected"` // receipts that did not prove a charge of this hospital's votes
	Stopped  bool   `json:"stopped"`
	Oldest   string `json:"oldest_unproven,omitempty"`
	// Fork describes two checkpoints of one size with different roots,
	// each cosigned by a majority, that the hospital's receipts showed it:
	// the auditors' logs forked, and the hospital votes no more until it
	// is restarted.
	Fork string `json:"fork,omitempty"`
}

// spending records every batch the hospital voted on until it sees the
// receipt of a committed charge that names it for those votes. When Lag
// batches are unproven it refuses to vote: an aggregator that skips or
// under-charges a hospital's votes gets no more of them.
//
// A batch id is bound, while its charge is unproven, to what the votes
// were cast on (binding): new queries, another student or another count
// under a known id are refused. A proof is matched to that binding and
// consumed once: it must name the batch id, the student and the count, and
// stand in the log at or after the size the hospital had last seen proven
// when it voted (a charge cannot precede the votes it covers), so the
// receipt of an earlier charge never proves a later use of the same id.
type spending struct {
	id string
	// receipts checks receipts against the auditors' pinned keys, opening
	// each cosigned checkpoint once; nil: no keys, no check.
	receipts *ledger.Verifier
	lag      int
	log      *slog.Logger
	path     string // the record's file (VoteRecordFile); "": memory only

	mu       sync.Mutex
	unproven map[string]voted // by hex batch id
	voted    int64
	proven   int64
	rejected int64
	// seen is the size of the largest log, cosigned by a majority, in
	// which this hospital has seen one of its charges proven: every
	// charge of a later vote stands at an index at or above it.
	seen uint64
	fork *ledger.ForkError // the first fork the receipts showed
}

// binding is what a batch id stands for at this hospital while its charge
// is unproven.
type binding struct {
	queries [32]byte // queryDigest of the features voted on
	student string
	count   uint32
}

type voted struct {
	binding
	after uint64 // seen when the hospital voted: its charge's least index
	at    time.Time
}

// queryDigest is the SHA-256 of a batch's queries as the hospital opened
// them: their number, their width and every value's bits.
func queryDigest(f *nzcpb.Features) [32]byte {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], f.GetNumQueries())
	binary.BigEndian.PutUint32(b[4:], f.GetFeatureDim())
	h.Write(b[:])
	// The values go to the hash in chunks, not one call each: the same
	// bytes, without a call per value (a batch holds ~200,000 of them).
	var buf [4096]byte
	n := 0
	for _, v := range f.GetValues() {
		if n == len(buf) {
			h.Write(buf[:])
			n = 0
		}
		binary.BigEndian.PutUint32(buf[n:], math.Float32bits(v))
		n += 4
	}
	h.Write(buf[:n])
	return [32]byte(h.Sum(nil))
}

// newSpending returns the record of hospital id's votes, checked with
// receipts (nil: not checked), kept in the file path when it is set (and
// reloaded from it), in memory otherwise.
func newSpending(id string, receipts *ledger.Verifier, lag int, log *slog.Logger, path string) (*spending, error) {
	if lag <= 0 {
		lag = DefaultProofLag
	}
	s := &spending{id: id, receipts: receipts, lag: lag, log: log, path: path, unproven: map[string]voted{}}
	if path != "" {
		if err := s.load(path); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// accept checks the charge receipts a query batch hands over and marks
// the batches they prove.
func (s *spending) accept(rs []*nzcpb.Receipt) {
	if s.receipts == nil || len(rs) == 0 {
		return
	}
	s.mu.Lock()
	seen := s.proven + s.rejected
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.proven+s.rejected == seen {
			return
		}
		if err := s.saveLocked(); err != nil {
			// The proofs count in memory; the file keeps them unproven
			// until a later save succeeds.
			s.log.Error("the proofs of this hospital's charges are not saved", "err", err)
		}
	}()
	for _, w := range rs {
		r, ok, err := protocol.ReceiptFromWire(w)
		if !ok || err != nil {
			s.reject("a charge receipt does not decode", err)
			continue
		}
		ch, en, sc, err := s.receipts.HospitalReceipt(r, s.id)
		var fork *ledger.ForkError
		if errors.As(err, &fork) {
			s.mu.Lock()
			s.rejected++
			if s.fork == nil {
				s.fork = fork
			}
			s.mu.Unlock()
			s.log.Error("the auditors' logs FORKED: two checkpoints of one size with different roots, each cosigned by a majority; this hospital votes no more until restarted (keep both notes and ask the auditors)",
				"err", err, "checkpoint_a", string(fork.NoteA), "checkpoint_b", string(fork.NoteB))
			continue
		}
		if err != nil {
			s.reject("a charge receipt does not prove a charge of this hospital", err)
			continue
		}
		s.mu.Lock()
		if err := s.proveLocked(ch, en.Index, uint64(sc.Size)); err != nil {
			s.rejected++
			s.log.Error("a charge receipt does not prove the votes this hospital cast under its batch id", "batch", ch.BatchID,
				"ledger_index", en.Index, "err", err)
		}
		s.mu.Unlock()
	}
}

// proveLocked consumes the unproven vote that the committed charge ch, at
// index in a log of size cosigned by a majority, proves; s.mu is held. A
// charge of a batch that is not unproven (proven already, or voted on
// before the record was kept) proves nothing and is not an error: an
// aggregator may hand a receipt over again when a batch fails.
func (s *spending) proveLocked(ch *ledger.Charge, index, size uint64) error {
	v, ok := s.unproven[ch.BatchID]
	switch {
	case !ok:
		return nil
	case index < v.after:
		return fmt.Errorf("the charge at ledger index %d was committed before this hospital voted on the batch (the log then held %d entries): it is the charge of an earlier use of the batch id", index, v.after)
	case v.student != "" && ch.Student != v.student:
		return fmt.Errorf("the charge names student %s, the votes were cast for student %s", ch.Student, v.student)
	case ch.Queries > uint64(v.count) || (!mechanism.Kind(ch.Mechanism).Sessions() && ch.Queries != uint64(v.count)):
		return fmt.Errorf("the charge is for %d queries, the hospital voted on %d", ch.Queries, v.count)
	}
	delete(s.unproven, ch.BatchID)
	s.proven++
	s.seen = max(s.seen, size)
	return nil
}

func (s *spending) reject(msg string, err error) {
	s.mu.Lock()
	s.rejected++
	s.mu.Unlock()
	s.log.Error(msg, "err", err)
}

// ErrBatchRebound is a batch id the hospital voted on, not yet proven,
// asked again for other queries, another student or another count.
var ErrBatchRebound = errors.New("teacher: a batch id already stands for other votes")

// boundLocked returns nil when batch is not unproven, a retry (true) when
// it is unproven with the same binding, and an error refusing the batch
// when it is unproven with another; s.mu is held.
func (s *spending) boundLocked(batch string, b binding) (bool, error) {
	v, ok := s.unproven[batch]
	switch {
	case !ok:
		return false, nil
	case v.binding == b:
		return true, nil
	}
	return false, protocol.Errorf(protocol.CodeBadRequest,
		"hospital %s refuses batch %s: %v (it voted on %d queries for student %s under this id, and now is asked %d for student %s); a new batch needs a new id",
		s.id, batch, ErrBatchRebound, v.count, v.student, b.count, b.student)
}

// allow returns an error, refusing the batch, when its id already stands
// for other votes or when the hospital has voted on Lag batches whose
// charges it has not seen proven.
func (s *spending) allow(batch []byte, b binding) error {
	if s.receipts == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fork != nil {
		return protocol.Errorf(protocol.CodeUnavailable, "hospital %s stops voting: %v", s.id, s.fork)
	}
	if again, err := s.boundLocked(hex.EncodeToString(batch), b); again || err != nil {
		return err // a retry of a batch already counted, or a refusal
	}
	if n := len(s.unproven); n >= s.lag {
		return protocol.Errorf(protocol.CodeUnavailable,
			"hospital %s stops voting: it voted on %d batches whose charges it has not seen proven by a majority of the auditors (the oldest %s); it votes again once the aggregator hands over their receipts",
			s.id, n, s.oldestLocked())
	}
	return nil
}

// record notes that the hospital voted on batch, bound to b, on disk
// before the votes leave: when the record cannot be saved, or the batch
// id stands for other votes, it returns an error and changes nothing, and
// the votes must not be sent.
func (s *spending) record(batch []byte, b binding, at time.Time) error {
	if s.receipts == nil {
		s.mu.Lock()
		s.voted++
		s.mu.Unlock()
		return nil
	}
	id := hex.EncodeToString(batch)
	s.mu.Lock()
	defer s.mu.Unlock()
	if again, err := s.boundLocked(id, b); again || err != nil {
		return err
	}
	s.voted++
	s.unproven[id] = voted{binding: b, after: s.seen, at: at}
	if err := s.saveLocked(); err != nil {
		s.voted--
		delete(s.unproven, id)
		return protocol.Errorf(protocol.CodeUnavailable, "hospital %s does not vote: %v", s.id, err)
	}
	return nil
}

func (s *spending) oldestLocked() string {
	ids := make([]string, 0, len(s.unproven))
	for id := range s.unproven {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return ""
	}
	return slices.MinFunc(ids, func(a, b string) int { return s.unproven[a].at.Compare(s.unproven[b].at) })
}

func (s *spending) status() Spending {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := Spending{Checked: s.receipts != nil, Voted: s.voted, Proven: s.proven, Unproven: len(s.unproven), Rejected: s.rejected,
		Stopped: s.receipts != nil && (len(s.unproven) >= s.lag || s.fork != nil), Oldest: s.oldestLocked()}
	if s.fork != nil {
		sp.Fork = s.fork.Error()
	}
	return sp
}
