package teacher

import (
	"encoding/hex"
	"errors"
	"log/slog"
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
	fork     *ledger.ForkError // the first fork the receipts showed
}

type voted struct {
	queries uint32
	at      time.Time
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
		ch, en, _, err := s.receipts.HospitalReceipt(r, s.id)
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
		v, ok := s.unproven[ch.BatchID]
		switch {
		case !ok:
			// Already proven, or voted on before the record was kept.
		case ch.Queries > uint64(v.queries) || (!mechanism.Kind(ch.Mechanism).Sessions() && ch.Queries != uint64(v.queries)):
			s.rejected++
			s.log.Error("a charge names this hospital for another number of queries than it voted on", "batch", ch.BatchID,
				"voted_queries", v.queries, "charged_queries", ch.Queries, "ledger_index", en.Index)
		default:
			delete(s.unproven, ch.BatchID)
			s.proven++
		}
		s.mu.Unlock()
	}
}

func (s *spending) reject(msg string, err error) {
	s.mu.Lock()
	s.rejected++
	s.mu.Unlock()
	s.log.Error(msg, "err", err)
}

// allow returns an error, refusing the batch, when the hospital has voted
// on Lag batches whose charges it has not seen proven.
func (s *spending) allow(batch []byte) error {
	if s.receipts == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fork != nil {
		return protocol.Errorf(protocol.CodeUnavailable, "hospital %s stops voting: %v", s.id, s.fork)
	}
	if _, again := s.unproven[hex.EncodeToString(batch)]; again {
		return nil // a retry of a batch already counted
	}
	if n := len(s.unproven); n >= s.lag {
		return protocol.Errorf(protocol.CodeUnavailable,
			"hospital %s stops voting: it voted on %d batches whose charges it has not seen proven by a majority of the auditors (the oldest %s); it votes again once the aggregator hands over their receipts",
			s.id, n, s.oldestLocked())
	}
	return nil
}

// record notes that the hospital voted on batch, on disk before the votes
// leave: when the record cannot be saved it returns an error and changes
// nothing, and the votes must not be sent.
func (s *spending) record(batch []byte, queries uint32, at time.Time) error {
	if s.receipts == nil {
		s.mu.Lock()
		s.voted++
		s.mu.Unlock()
		return nil
	}
	id := hex.EncodeToString(batch)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, again := s.unproven[id]; again {
		return nil
	}
	s.voted++
	s.unproven[id] = voted{queries: queries, at: at}
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
