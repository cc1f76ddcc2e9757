package e2e

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/budget"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/party/aggregator"
	"github.com/nzcfed/nzc/party/student"
	"github.com/nzcfed/nzc/party/teacher"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// hardTeachers is a hospital's ensemble of hardTeachers teachers: on a
// query whose third feature is 1 their votes split evenly between two
// classes (distance to instability 0: an nzc-svt session refuses it), on
// the others they all vote class x[0].
const hardTeachers = 100

type hardVoter struct{}

func (hardVoter) Teachers() int { return hardTeachers }
func (hardVoter) Classes() int  { return classes }
func (hardVoter) Dim() int      { return dim }
func (hardVoter) Votes(_ context.Context, x []float32) ([][]int, error) {
	out := make([][]int, len(x)/dim)
	for q := range out {
		c := int(x[q*dim]) % classes
		out[q] = make([]int, classes)
		if x[q*dim+2] == 1 {
			out[q][c], out[q][(c+1)%classes] = hardTeachers/2, hardTeachers/2
			continue
		}
		out[q][c] = hardTeachers
	}
	return out, nil
}

// hardPool is n queries, every third from the 13th on split.
func hardPool(n int) *data.Dataset {
	d := dataset(n, 0)
	for i := 12; i < n; i += 3 {
		d.X[i*dim+2] = 1
	}
	return d
}

// TestFallbackAfterSession runs the plan in a whole federation: the
// aggregator answers in nzc-svt sessions (K = 1) and offers GNMax as its
// fallback; the student's session meets a query the teachers split on and
// ends at its refusal bound after 12 answers, and the student asks the
// rest of the hospitals' cap under the fallback: exactly as many queries
// as budget.Rest says it buys. Every charge is proven, each hospital's ε
// is within its cap, the ledger verifies against the pinned directory,
// and a fallback batch past the cap is refused before any hospital votes.
func TestFallbackAfterSession(t *testing.T) {
	const (
		cap   = 3.0
		delta = 1e-5
		pool  = 40
		sigma = 10.0
	)
	f := newFederation(t, 1, nil)
	startAuditors(t, f)
	session, err := mechanism.NZCSVT.PlanSession(1, delta/2, 1, 3*hardTeachers, classes)
	if err != nil {
		t.Fatal(err)
	}
	session.Teachers, session.Classes = 0, 0
	fallback := mechanism.Params{Mechanism: mechanism.GNMax, Sigma: sigma}
	g := group(t)
	agg := f.startAggregator(g, "127.0.0.1:0", f.ledgerClient(), aggregator.Config{
		OutboxDir: t.TempDir(), Mechanism: session, Fallback: fallback,
		Quorum: 3, Hospitals: 3, BatchDeadline: 10 * time.Second, Classes: classes, Ensemble: hardTeachers,
		// Seeded noise: the test's outcome is fixed. The session's threshold
		// is 40 and a split query's distance 0, an unanimous one's 150.
		Rand: rand.NewChaCha8([32]byte{7}),
	})
	hospitals := f.startHospitals(g, agg, cap, func(int) teacher.Voter { return hardVoter{} })

	stP := f.party(crypto.RoleStudent, "student-1")
	st, err := student.New(student.Config{ID: stP.ID, Aggregator: agg.Addr, Net: f.net(stP), Identity: f.identity(stP), AuditorKeys: f.auditorKeys(),
		Hospitals: hospitals, BatchSize: 4, Window: 2, StateDir: t.TempDir(), Attempts: 20,
		Backoff: quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond}, Logger: logger(t).With("party", "student"),
		Fallback: &student.FallbackConfig{}, // the hospitals' cap, read from the ledger
	})
	if err != nil {
		t.Fatal(err)
	}
	d := hardPool(pool)
	res, err := st.Label(t.Context(), d, nil)
	if err != nil {
		t.Fatal(err)
	}

	// What the plan should buy, from the session's cost alone.
	g2 := mechanism.DefaultGrid()
	p := session
	p.Teachers, p.Classes = 3*hardTeachers, classes
	spent, err := p.Charge(g2, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	fb := fallback
	fb.Teachers, fb.Classes = 3*hardTeachers, classes
	// The session answers queries 0–11 and refuses 12, the last of its
	// batch's first query; 13–15 are refused unseen; 16–39 are not asked.
	want, wantEps, err := budget.Rest(spent, fb, cap, delta, pool-16)
	if err != nil || want < 1 || want >= pool-16 {
		t.Fatalf("the rest of the cap buys %d of %d queries (%v): the test wants the cap to bind", want, pool-16, err)
	}
	plan := res.Plan
	if plan == nil {
		t.Fatal("a planned run reports no plan")
	}
	t.Logf("plan: %+v", *plan)
	if plan.Sessions != 1 || plan.SessionAnswered != 12 || plan.SessionRefused != 4 || plan.FallbackPlanned != want || plan.FallbackAnswered != want ||
		plan.Cap != cap || plan.Delta != delta {
		t.Fatalf("plan %+v; want 1 session of 12 answers and 4 refusals, then %d fallback answers within cap %v at δ %v", *plan, want, cap, delta)
	}
	if plan.Epsilon > cap || plan.Epsilon < wantEps-1e-9 {
		t.Fatalf("the plan's proven ε %v; want %v, within the cap %v", plan.Epsilon, wantEps, cap)
	}
	if res.Answered != 12+want || res.ProofsVerified != len(res.Batches) {
		t.Fatalf("%d labels, %d of %d batches proven; want %d labels, every batch proven", res.Answered, res.ProofsVerified, len(res.Batches), 12+want)
	}
	for q, l := range res.Labels {
		if l >= 0 && d.X[q*dim+2] != 1 && l != d.Y[q] {
			t.Errorf("query %d: label %d, every teacher voted %d", q, l, d.Y[q])
		}
	}

	// The ledger: one session, then fallback charges of exactly the
	// planned queries, priced as the fallback's.
	charges := f.charges()
	inSession, fallbackQueries := 0, uint64(0)
	for _, ch := range charges {
		switch {
		case ch.Session != "":
			inSession++
		case ch.Mechanism == string(mechanism.GNMax):
			fallbackQueries += ch.Queries
		default:
			t.Fatalf("batch %s charged %s outside a session", ch.BatchID, ch.Mechanism)
		}
	}
	if inSession != 4 || fallbackQueries != uint64(want) {
		t.Fatalf("%d batches charged in the session and %d fallback queries; want 4 and %d", inSession, fallbackQueries, want)
	}
	verify := func() *ledger.Report {
		t.Helper()
		cp, err := f.auditors[0].CosignCheckpoint(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		export, err := f.machines[0].State().Export([][]byte{cp})
		if err != nil {
			t.Fatal(err)
		}
		r, err := f.fed.Verify(export)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK {
			var b bytes.Buffer
			_ = r.WriteText(&b)
			t.Fatalf("the ledger does not verify:\n%s", b.String())
		}
		return r
	}
	r := verify()
	for _, a := range r.Accounts {
		if a.Epsilon > cap || a.Epsilon < wantEps-1e-6 || a.Answers != uint64(12+want) {
			t.Fatalf("%s: ε %v on %d answers; want the plan's ε %v ≤ cap %v on %d answers", a.Hospital, a.Epsilon, a.Answers, wantEps, cap, 12+want)
		}
	}

	// A second run resumes every batch, the fallback's included, and asks
	// nothing again.
	again, err := st.Label(t.Context(), d, nil)
	if err != nil || again.Resumed != len(res.Batches) || len(again.Batches) != len(res.Batches) || again.Plan == nil || again.Plan.FallbackAnswered != want {
		t.Fatalf("a second run resumed %d of %d batches (%v), plan %+v; want all, the same plan", again.Resumed, len(res.Batches), err, again.Plan)
	}
	if n := len(f.charges()); n != len(charges) {
		t.Fatalf("%d charges after the resumed run, %d before", n, len(charges))
	}

	// A student that asks past its plan under the fallback is refused
	// before any hospital votes, and nothing is charged.
	err = askFallback(t, f, agg.Addr, hospitals, dataset(4, 900))
	if !errors.Is(err, protocol.ErrBudgetExhausted) {
		t.Fatalf("a fallback batch past the cap: %v; want budget-exhausted", err)
	}
	after := f.charges()
	if len(after) != len(charges) {
		t.Fatalf("%d charges after the refused batch, %d before", len(after), len(charges))
	}
	for _, a := range verify().Accounts {
		if a.Epsilon > cap {
			t.Fatalf("%s: ε %v over its cap %v", a.Hospital, a.Epsilon, cap)
		}
	}
}

// askFallback asks the aggregator, as student-1, to label d under the
// fallback, outside any plan, and returns its answer's error.
func askFallback(t *testing.T, f *federation, addr string, hospitals []*crypto.Recipient, d *data.Dataset) error {
	t.Helper()
	stP := f.party(crypto.RoleStudent, "student-1")
	id := f.identity(stP)
	conn, err := quicnet.Connect(t.Context(), f.net(stP), quicnet.Target{Name: "aggregator", Addr: addr, Role: crypto.RoleAggregator}, quicnet.Backoff{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var ack nzcpb.Ack
	if err := conn.Invoke(t.Context(), &nzcpb.Hello{ProtocolVersion: protocol.ProtocolVersion, Role: nzcpb.Role_ROLE_STUDENT,
		PartyId: stP.ID, AgeRecipient: id.Recipient().String()}, &ack); err != nil {
		t.Fatal(err)
	}
	if ack.GetFallback().GetMechanism() != string(mechanism.GNMax) {
		t.Fatalf("the aggregator offers the fallback %v, want gnmax", ack.GetFallback())
	}
	plain, err := protocol.Marshal(&nzcpb.Features{NumQueries: uint32(d.Len()), FeatureDim: uint32(d.Dim()), Values: d.X})
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := crypto.Seal(plain, hospitals...)
	if err != nil {
		t.Fatal(err)
	}
	return conn.Invoke(t.Context(), &nzcpb.LabelRequest{BatchId: bytes.Repeat([]byte{0xfb}, 16), NumQueries: uint32(d.Len()), FeatureDim: uint32(d.Dim()),
		SealedFeatures: sealed, Fallback: true}, &nzcpb.LabelResponse{})
}
