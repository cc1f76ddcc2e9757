package intake

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// applyingNode replicates by applying to one State and counts what it was
// asked to replicate.
type applyingNode struct {
	st *ledger.State

	mu       sync.Mutex
	proposed int
}

func (n *applyingNode) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proposed
}

func (n *applyingNode) Submit(_ context.Context, cmd []byte) ([]byte, uint64, error) {
	n.mu.Lock()
	n.proposed++
	n.mu.Unlock()
	r, err := n.st.Apply(cmd)
	if err != nil {
		return nil, 0, err
	}
	return ledger.EncodeResult(r), r.Index, nil
}

type stateLedger struct{ st *ledger.State }

func (l stateLedger) Checkpoint(uint64) ([]byte, error) {
	return nil, errors.New("no checkpoints here")
}
func (l stateLedger) State() *ledger.State { return l.st }

// Junk relayed for a hospital — 300 change-cap commands with stale
// versions, forged or another party's signatures, and bytes that are no
// command — is answered without being proposed: the log does not grow
// (before, each became a permanent refused entry on every auditor). A
// valid change is proposed and answered as before; replayed, it is refused
// unproposed.
func TestJunkRelayedCommandsAreNotProposed(t *testing.T) {
	st := receiptKeys.NewLedger(t, "h1", "h2").State
	// sign signs b as signer, with the key of keyOf.
	sign := func(b ledger.Body, signer, keyOf string) []byte {
		t.Helper()
		cmd, err := ledger.Sign(b, signer, receiptKeys.Key(keyOf))
		if err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	node := &applyingNode{st: st}
	s := &Server{Node: node, Ledger: stateLedger{st}, Now: func() time.Time { return time.Unix(0, 9) }}
	size := st.TreeSize()

	for i := range 300 {
		var cmd []byte
		switch i % 4 {
		case 0: // a version far ahead
			cmd = sign(&ledger.ChangeCap{Hospital: "h1", Version: uint64(i + 2), CapEpsilon: 1, CapDelta: 1e-5, Timestamp: int64(i)}, "h1", "h1")
		case 1: // signed by another hospital
			cmd = sign(&ledger.ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 1, CapDelta: 1e-5, Timestamp: int64(i)}, "h2", "h2")
		case 2: // a forged signature
			cmd = sign(&ledger.ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 1, CapDelta: 1e-5, Timestamp: int64(i)}, "h1", "h2")
		case 3:
			cmd = []byte{0x4e, 0x5a, byte(i)}
		}
		res, err := s.Propose(t.Context(), cmd)
		if err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED {
			t.Fatalf("junk %d: %v %v, want rejected", i, res, err)
		}
	}
	if node.proposed != 0 || st.TreeSize() != size {
		t.Fatalf("%d junk commands proposed, the log grew from %d to %d", node.proposed, size, st.TreeSize())
	}

	good := sign(&ledger.ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 4, CapDelta: 1e-5, Timestamp: 9}, "h1", "h1")
	res, err := s.Propose(t.Context(), good)
	if err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED || node.proposed != 1 {
		t.Fatalf("a valid change: %v %v (proposed %d)", res, err, node.proposed)
	}
	again, err := s.Propose(t.Context(), good)
	if err != nil || again.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED || node.proposed != 1 || st.TreeSize() != size+1 {
		t.Fatalf("the same change replayed: %v %v (proposed %d), want rejected unproposed", again, err, node.proposed)
	}
}

// A budget read that names a student reports its quota from the ledger.
func TestBudgetsReportTheStudentsQuota(t *testing.T) {
	l := receiptKeys.NewLedger(t)
	l.Apply(&ledger.RegisterParty{Party: receiptKeys.Party("s2", ledger.RoleStudent), Timestamp: 5}, "admin")
	l.Apply(&ledger.RegisterStudent{Student: "s2", MaxAnswers: 40, Timestamp: 6}, "admin")
	st := l.State
	if q := Budgets(st, &nzcpb.BudgetRequest{StudentId: "s2"}).GetStudent(); !q.GetRegistered() || q.GetMaxAnswers() != 40 || q.GetAnswers() != 0 {
		t.Fatalf("s2: %v", q)
	}
	if q := Budgets(st, &nzcpb.BudgetRequest{StudentId: "s9"}).GetStudent(); q == nil || q.GetRegistered() {
		t.Fatalf("an unknown student: %v", q)
	}
	if q := Budgets(st, &nzcpb.BudgetRequest{}).GetStudent(); q != nil {
		t.Fatalf("no student asked: %v", q)
	}
}
