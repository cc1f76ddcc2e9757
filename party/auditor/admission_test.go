package auditor

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
)

// The leader proposes a signer's budget-refused charges, to be recorded,
// at RecordBurst at once and then one every RecordEvery; beyond that the
// sender gets the same refusal without an entry. (Every such charge was
// proposed: the aggregator alone could fill the log with refusal records
// as fast as raft commits, through any intake.)
func TestScreenPacesRecordedRefusals(t *testing.T) {
	st := ledger.New()
	apply := func(cmd []byte) {
		t.Helper()
		if r, err := st.Apply(cmd); err != nil || r.Status != ledger.StatusAccepted {
			t.Fatalf("%v %+v", err, r)
		}
	}
	for _, cmd := range testGenesis(t, []string{"a1", "a2", "a3"}) {
		apply(cmd)
	}
	now := time.Unix(1_800_000_000, 0)
	apply(signed(t, &ledger.OpenAccount{Hospital: "h1", CapEpsilon: 0.01, CapDelta: 1e-5, Timestamp: now.UnixNano()}, "h1"))
	params := mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 40}
	cost, err := params.Charge(mechanism.DefaultGrid(), 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	overCap := func() []byte {
		n++
		batch := fmt.Sprintf("b%d", n)
		return signed(t, &ledger.Charge{BatchID: batch, Student: "s1", Hospitals: []string{"h1"}, Mechanism: "gnmax",
			Params: params.LedgerParams(), Queries: 100, Answers: 100, Curve: cost.RDP.Values(),
			AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: now.UnixNano()}, "agg")
	}
	s := newScreen(st, func() time.Time { return now })
	for i := range RecordBurst {
		if refusal := s.Screen("a1", overCap()); refusal != nil {
			t.Fatalf("over-cap charge %d of the burst not proposed", i)
		}
	}
	refusal := s.Screen("a1", overCap())
	if refusal == nil {
		t.Fatalf("over-cap charge %d proposed, beyond the burst of %d", RecordBurst+1, RecordBurst)
	}
	if r, err := ledger.DecodeResult(refusal); err != nil || r.Code != ledger.CodeCapExceeded {
		t.Fatalf("answered %+v (%v), want the cap refusal", r, err)
	}
	now = now.Add(RecordEvery)
	if s.Screen("a1", overCap()) != nil {
		t.Fatalf("no over-cap charge proposed %v later", RecordEvery)
	}
	if s.Screen("a1", overCap()) == nil {
		t.Fatal("two over-cap charges proposed in one RecordEvery")
	}
}
