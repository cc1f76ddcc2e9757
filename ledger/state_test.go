package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

// view is everything a command may change, apart from the log itself.
type view struct {
	Accounts []Account
	Parties  []Party
	Students map[string]studentAcct
	Batches  map[string]applied
	Sessions map[string]session
}

func viewOf(st *State) view {
	st.mu.RLock()
	defer st.mu.RUnlock()
	v := view{Students: map[string]studentAcct{}, Batches: maps.Clone(st.batches), Sessions: map[string]session{}}
	for k, s := range st.students {
		v.Students[k] = *s
	}
	for k, s := range st.sessions {
		v.Sessions[k] = *s
	}
	st.mu.RUnlock()
	v.Accounts, v.Parties = st.Accounts(), st.Parties()
	st.mu.RLock()
	return v
}

func TestApplyRefusals(t *testing.T) {
	big := gaussCurve(1, 50) // far over every cap
	small := gaussCurve(40, 10)
	inf := gaussCurve(40, 1)
	inf[3] = math.Inf(1)
	for i := range inf {
		inf[i] = math.Inf(1)
	}
	negative := gaussCurve(40, 1)
	negative[5] = -1e-9

	tests := []struct {
		name    string
		prepare func(f *fed)
		cmd     func(f *fed) []byte
		status  Status
		code    Code
		subject string
	}{
		{name: "charge accepted", cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", []string{"h1", "h3"}, small, 10), "agg") },
			status: StatusAccepted},
		{name: "cap exceeded", cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", []string{"h1", "h2"}, big, 10), "agg") },
			status: StatusRefused, code: CodeCapExceeded, subject: "h1"},
		{name: "cap exceeded names the hospital over its cap", cmd: func(f *fed) []byte {
			return f.sign(chargeBody("b1", []string{"h1", "h2", "h3"}, gaussCurve(8, 10), 10), "agg")
		}, status: StatusRefused, code: CodeCapExceeded, subject: "h2"},
		{name: "infinite curve refused by a finite cap", cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", []string{"h1"}, inf, 1), "agg") },
			status: StatusRefused, code: CodeCapExceeded, subject: "h1"},
		{name: "bad signature", cmd: func(f *fed) []byte {
			b := f.sign(chargeBody("b1", []string{"h1"}, small, 10), "agg")
			b[len(b)-1] ^= 1
			return b
		}, status: StatusRefused, code: CodeBadSignature, subject: "agg"},
		{name: "signed with another party's key", cmd: func(f *fed) []byte {
			b, err := Sign(chargeBody("b1", []string{"h1"}, small, 10), "agg", testKey("h1"))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}, status: StatusRefused, code: CodeBadSignature, subject: "agg"},
		{name: "content changed after signing", cmd: func(f *fed) []byte {
			b := f.sign(chargeBody("b1", []string{"h1"}, small, 10), "agg")
			i := bytes.Index(b, []byte("gnmax"))
			b[i] = 'G'
			return b
		}, status: StatusRefused, code: CodeBadSignature, subject: "agg"},
		{name: "unknown signer", cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", []string{"h1"}, small, 10), "mallory") },
			status: StatusRefused, code: CodeUnknownSigner, subject: "mallory"},
		{name: "hospital cannot charge", cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", []string{"h1"}, small, 10), "h1") },
			status: StatusRefused, code: CodeWrongSigner, subject: "h1"},
		{name: "unknown hospital", cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", []string{"h1", "h9"}, small, 10), "agg") },
			status: StatusRefused, code: CodeUnknownHospital, subject: "h9"},
		{name: "a student is not a hospital", cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", []string{"h1", "s1"}, small, 10), "agg") },
			status: StatusRefused, code: CodeUnknownHospital, subject: "s1"},
		{name: "hospital without an account", prepare: func(f *fed) {
			f.must(&RegisterParty{Party: testParty("h4", RoleHospital), Timestamp: f.now()}, "admin")
		}, cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", []string{"h1", "h4"}, small, 10), "agg") },
			status: StatusRefused, code: CodeNoAccount, subject: "h4"},
		{name: "unknown student", cmd: func(f *fed) []byte {
			b := chargeBody("b1", []string{"h1"}, small, 10)
			b.Student = "s9"
			return f.sign(b, "agg")
		}, status: StatusRefused, code: CodeUnknownStudent, subject: "s9"},
		{name: "student party not registered as a student", prepare: func(f *fed) {
			f.must(&RegisterParty{Party: testParty("s3", RoleStudent), Timestamp: f.now()}, "admin")
		}, cmd: func(f *fed) []byte {
			b := chargeBody("b1", []string{"h1"}, small, 10)
			b.Student = "s3"
			return f.sign(b, "agg")
		}, status: StatusRefused, code: CodeUnknownStudent, subject: "s3"},
		{name: "quota exceeded", cmd: func(f *fed) []byte {
			b := chargeBody("b1", []string{"h1"}, small, 101)
			b.Student = "s1"
			return f.sign(b, "agg")
		}, status: StatusRefused, code: CodeQuotaExceeded, subject: "s1"},
		{name: "curve off the grid", cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", []string{"h1"}, small[:10], 10), "agg") },
			status: StatusRefused, code: CodeBadCurve},
		{name: "negative curve value", cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", []string{"h1"}, negative, 10), "agg") },
			status: StatusRefused, code: CodeBadCurve},
		{name: "more answers than queries", cmd: func(f *fed) []byte {
			b := chargeBody("b1", []string{"h1"}, small, 10)
			b.Queries = 9
			return f.sign(b, "agg")
		}, status: StatusRefused, code: CodeBadCharge, subject: "b1"},
		{name: "no hospital", cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", nil, small, 10), "agg") },
			status: StatusRefused, code: CodeBadCharge},
		{name: "additive δ of 1", cmd: func(f *fed) []byte {
			b := chargeBody("b1", []string{"h1"}, small, 10)
			b.Delta = 1
			return f.sign(b, "agg")
		}, status: StatusRefused, code: CodeBadCharge},
		{name: "additive δ exhausts the hospital's δ", cmd: func(f *fed) []byte {
			b := chargeBody("b1", []string{"h1", "h2"}, small, 10)
			b.Delta = 1e-6
			return f.sign(b, "agg")
		}, status: StatusRefused, code: CodeDeltaExhausted, subject: "h2"},
		{name: "malformed bytes", cmd: func(f *fed) []byte { return []byte("not a command") },
			status: StatusRefused, code: CodeMalformed},
		{name: "second genesis", cmd: func(f *fed) []byte { return f.sign(genesisBody(), "admin") },
			status: StatusRefused, code: CodeGenesisRepeated},
		{name: "repeated batch returns the original", prepare: func(f *fed) {
			f.must(chargeBody("b1", []string{"h1"}, small, 10), "agg")
		}, cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", []string{"h1"}, small, 10), "agg") },
			status: StatusDuplicate},
		{name: "batch id reused for other content", prepare: func(f *fed) {
			f.must(chargeBody("b1", []string{"h1"}, small, 10), "agg")
		}, cmd: func(f *fed) []byte { return f.sign(chargeBody("b1", []string{"h1"}, small, 9), "agg") },
			status: StatusRefused, code: CodeConflict, subject: "b1"},
		{name: "a hospital opens only its own account", prepare: func(f *fed) {
			f.must(&RegisterParty{Party: testParty("h4", RoleHospital), Timestamp: f.now()}, "admin")
		}, cmd: func(f *fed) []byte {
			return f.sign(&OpenAccount{Hospital: "h4", CapEpsilon: 100, CapDelta: 1e-5, Timestamp: f.now()}, "h1")
		}, status: StatusRefused, code: CodeWrongSigner, subject: "h1"},
		{name: "the aggregator cannot open an account", prepare: func(f *fed) {
			f.must(&RegisterParty{Party: testParty("h4", RoleHospital), Timestamp: f.now()}, "admin")
		}, cmd: func(f *fed) []byte {
			return f.sign(&OpenAccount{Hospital: "h4", CapEpsilon: 100, CapDelta: 1e-5, Timestamp: f.now()}, "agg")
		}, status: StatusRefused, code: CodeWrongSigner, subject: "agg"},
		{name: "account opened twice", cmd: func(f *fed) []byte {
			return f.sign(&OpenAccount{Hospital: "h1", CapEpsilon: 100, CapDelta: 1e-5, Timestamp: f.now()}, "h1")
		}, status: StatusRefused, code: CodeAccountExists, subject: "h1"},
		{name: "infinite cap", prepare: func(f *fed) {
			f.must(&RegisterParty{Party: testParty("h4", RoleHospital), Timestamp: f.now()}, "admin")
		}, cmd: func(f *fed) []byte {
			return f.sign(&OpenAccount{Hospital: "h4", CapEpsilon: math.Inf(1), CapDelta: 1e-5, Timestamp: f.now()}, "h4")
		}, status: StatusRefused, code: CodeBadCap, subject: "h4"},
		{name: "cap raised by the hospital's signed request", cmd: func(f *fed) []byte {
			return f.sign(&ChangeCap{Hospital: "h2", Version: 1, CapEpsilon: 3, CapDelta: 1e-6, Timestamp: f.now()}, "h2")
		}, status: StatusAccepted},
		{name: "cap change by someone else", cmd: func(f *fed) []byte {
			return f.sign(&ChangeCap{Hospital: "h2", Version: 1, CapEpsilon: 30, CapDelta: 1e-6, Timestamp: f.now()}, "agg")
		}, status: StatusRefused, code: CodeWrongSigner, subject: "agg"},
		{name: "cap change replayed", prepare: func(f *fed) {
			f.must(&ChangeCap{Hospital: "h2", Version: 1, CapEpsilon: 3, CapDelta: 1e-6, Timestamp: f.now()}, "h2")
			f.must(&ChangeCap{Hospital: "h2", Version: 2, CapEpsilon: 1, CapDelta: 1e-6, Timestamp: f.now()}, "h2")
		}, cmd: func(f *fed) []byte {
			return f.sign(&ChangeCap{Hospital: "h2", Version: 1, CapEpsilon: 3, CapDelta: 1e-6, Timestamp: f.now()}, "h2")
		}, status: StatusRefused, code: CodeStaleCapVersion, subject: "h2"},
		{name: "party registered twice", cmd: func(f *fed) []byte {
			return f.sign(&RegisterParty{Party: testParty("h1", RoleHospital)}, "admin")
		}, status: StatusRefused, code: CodePartyExists, subject: "h1"},
		{name: "only the admin registers parties", cmd: func(f *fed) []byte {
			return f.sign(&RegisterParty{Party: testParty("h9", RoleHospital)}, "agg")
		}, status: StatusRefused, code: CodeWrongSigner, subject: "agg"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFed(t)
			if tc.prepare != nil {
				tc.prepare(f)
			}
			before := viewOf(f.st)
			size := f.st.TreeSize()
			r := f.apply(tc.cmd(f))
			if r.Status != tc.status || r.Code != tc.code || r.Subject != tc.subject {
				t.Fatalf("got %s/%s subject %q (%s), want %s/%s subject %q", r.Status, r.Code, r.Subject, r.Message, tc.status, tc.code, tc.subject)
			}
			if r.Index != uint64(size) || f.st.TreeSize() != size+1 {
				t.Fatalf("result index %d, tree size %d → %d: every command must append one entry", r.Index, size, f.st.TreeSize())
			}
			after := viewOf(f.st)
			changed := !reflect.DeepEqual(before, after)
			if changed != (tc.status == StatusAccepted) {
				t.Fatalf("state changed = %v for a %s command", changed, r.Status)
			}
			if err := r.Err(); (err != nil) != (tc.status == StatusRefused) {
				t.Fatalf("Err() = %v for status %s", err, r.Status)
			}
		})
	}
}

func TestCapExceededReportsFigures(t *testing.T) {
	f := newFed(t)
	f.must(chargeBody("b1", []string{"h2"}, gaussCurve(20, 10), 10), "agg")
	r := f.apply(f.sign(chargeBody("b2", []string{"h2"}, gaussCurve(5, 10), 10), "agg"))
	var re *RefusalError
	if !errors.As(r.Err(), &re) || re.Code != CodeCapExceeded || re.Subject != "h2" {
		t.Fatalf("want a cap-exceeded refusal naming h2, got %v", r.Err())
	}
	g := mechanism.DefaultGrid()
	spent, _ := g.CurveOf(gaussCurve(20, 10))
	charge, _ := g.CurveOf(gaussCurve(5, 10))
	wantSpent, _ := spent.FilterEpsilon(1e-6)
	wantCharge, _ := charge.FilterEpsilon(1e-6)
	// The ledger charges the stated curves rounded up onto its lattice: the
	// figures agree to far better than nine digits, and are never below.
	if !near(re.SpentEpsilon, wantSpent.Epsilon) || !near(re.ChargeEpsilon, wantCharge.Epsilon) || re.CapEpsilon != 2 {
		t.Fatalf("refusal figures spent %v charge %v cap %v, want %v %v 2", re.SpentEpsilon, re.ChargeEpsilon, re.CapEpsilon, wantSpent.Epsilon, wantCharge.Epsilon)
	}
}

func TestBeforeGenesis(t *testing.T) {
	f := &fed{t: t, st: New()}
	r := f.apply(f.sign(&RegisterStudent{Student: "s1"}, "admin"))
	if r.Code != CodeNoGenesis {
		t.Fatalf("got %s, want no-genesis", r.Code)
	}
	g := genesisBody()
	g.Parties = []Party{testParty("admin", RoleAdmin)}
	if r := f.apply(f.sign(g, "admin")); r.Code != CodeBadGenesis {
		t.Fatalf("genesis without auditor: got %s, want bad-genesis", r.Code)
	}
	if r := f.apply(f.sign(genesisBody(), "agg")); r.Code != CodeWrongSigner {
		t.Fatalf("genesis signed by the aggregator: got %s, want wrong-signer", r.Code)
	}
	f.must(genesisBody(), "admin")
	if f.st.Origin() != testOrigin || f.st.TreeSize() != 4 {
		t.Fatalf("origin %q size %d", f.st.Origin(), f.st.TreeSize())
	}
}

// TestEpsilonAgreesWithMechanism recomputes each hospital's ε from the
// charges with the mechanism package alone.
func TestEpsilonAgreesWithMechanism(t *testing.T) {
	f := newFed(t)
	g := mechanism.DefaultGrid()
	type charge struct {
		hospitals []string
		sigma     float64
		k         int
		delta     float64
	}
	charges := []charge{
		{[]string{"h1", "h3"}, 40, 100, 0},
		{[]string{"h1"}, 25, 30, 1e-7},
		{[]string{"h1", "h2", "h3"}, 60, 50, 1e-8},
		{[]string{"h3"}, 30, 10, 2e-6},
	}
	want := map[string]mechanism.Curve{"h1": g.Zero(), "h2": g.Zero(), "h3": g.Zero()}
	deltas := map[string]float64{}
	for i, c := range charges {
		b := chargeBody(string(rune('a'+i)), c.hospitals, gaussCurve(c.sigma, c.k), uint64(c.k))
		b.Delta, b.Params = c.delta, gnmaxParams(c.sigma)
		f.must(b, "agg")
		for _, h := range c.hospitals {
			// The curve of k GNMax answers, composed answer by answer.
			one := mechanism.Gaussian(g, math.Sqrt2, c.sigma)
			for range c.k {
				want[h], _ = want[h].Compose(one)
			}
			deltas[h] += c.delta
		}
	}
	caps := map[string]float64{"h1": 1e-5, "h2": 1e-6, "h3": 1e-5}
	for _, a := range f.st.Accounts() {
		conv, err := want[a.Hospital].FilterEpsilon(caps[a.Hospital] - deltas[a.Hospital])
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(a.Epsilon-conv.Epsilon) > 1e-9*conv.Epsilon {
			t.Errorf("%s: ledger ε %v, mechanism ε %v", a.Hospital, a.Epsilon, conv.Epsilon)
		}
		if a.DeltaSpent != deltas[a.Hospital] {
			t.Errorf("%s: δ spent %v, want %v", a.Hospital, a.DeltaSpent, deltas[a.Hospital])
		}
	}
}

// TestCapAtHospitalDelta: the same charge is within h1's cap at h1's δ and
// refused by h2's equal ε cap at h2's smaller δ; ε is converted at each
// hospital's own δ.
func TestCapAtHospitalDelta(t *testing.T) {
	f := newFed(t)
	f.must(&ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 2.5, CapDelta: 1e-5, Timestamp: f.now()}, "h1")
	f.must(&ChangeCap{Hospital: "h2", Version: 1, CapEpsilon: 2.5, CapDelta: 1e-10, Timestamp: f.now()}, "h2")
	curve := gaussCurve(20, 40)
	g := mechanism.DefaultGrid()
	c, _ := g.CurveOf(curve)
	at5, _ := c.FilterEpsilon(1e-5)
	at10, _ := c.FilterEpsilon(1e-10)
	if !(at5.Epsilon < 2.5 && at10.Epsilon > 2.5) {
		t.Fatalf("test curve must straddle the cap: ε=%v at 1e-5, %v at 1e-10", at5.Epsilon, at10.Epsilon)
	}
	if r := f.apply(f.sign(chargeBody("b1", []string{"h1", "h2"}, curve, 40), "agg")); r.Code != CodeCapExceeded || r.Subject != "h2" {
		t.Fatalf("got %s %s, want cap-exceeded for h2", r.Code, r.Subject)
	}
	f.must(chargeBody("b2", []string{"h1"}, curve, 40), "agg")
	acc := f.st.Accounts()[0]
	if acc.Hospital != "h1" || !near(acc.Epsilon, at5.Epsilon) {
		t.Fatalf("h1 ε %v, want %v", acc.Epsilon, at5.Epsilon)
	}
}

func TestSVTSession(t *testing.T) {
	f := newFed(t)
	open := openSession(t, "svt1", "s2", []string{"h1", "h3"}, 3)
	open.Timestamp = f.now()
	cost := open.Curve
	epsOf := func() (float64, float64) { a := f.st.Accounts(); return a[0].Epsilon, a[2].Epsilon }
	e0, _ := epsOf()
	if e0 != 0 {
		t.Fatalf("fresh ε %v", e0)
	}
	first := f.must(open, "agg")
	h1, h3 := epsOf()
	g := mechanism.DefaultGrid()
	c, _ := g.CurveOf(cost)
	want, _ := c.FilterEpsilon(1e-5 - open.Delta)
	// A session is pure DP: its ε is the smaller of the curve's filter
	// conversion and its own pure ε.
	pure, _ := svtParams(3).Charge(g, 0, 0)
	wantEps := min(want.Epsilon, pure.PureEpsilon)
	if !near(h1, wantEps) || !near(h3, wantEps) || wantEps != pure.PureEpsilon {
		t.Fatalf("after opening ε = %v, %v; want the session's whole cost %v (its pure ε %v, filter %v)", h1, h3, wantEps, pure.PureEpsilon, want.Epsilon)
	}
	// PureSum is the account's own sum, to the bit.
	if s := PureSum(1, pure.PureEpsilon); s != h1 {
		t.Fatalf("PureSum(1, %v) = %v, the account holds %v", pure.PureEpsilon, s, h1)
	}
	if r := f.apply(f.sign(open, "agg")); r.Status != StatusDuplicate || r.Original != first.Index {
		t.Fatalf("reopening: %s original %d", r.Status, r.Original)
	}
	zero := make([]float64, g.Len())
	in := func(batch string, q, a uint64) *Charge {
		b := chargeBody(batch, []string{"h1", "h3"}, zero, a)
		b.Session, b.Mechanism, b.Params, b.Queries = "svt1", "nzc-svt", svtParams(3).LedgerParams(), q
		return b
	}
	f.must(in("q1", 50, 48), "agg")
	f.must(in("q2", 50, 50), "agg")
	if a, b := epsOf(); a != h1 || b != h3 {
		t.Fatalf("answers in the session changed ε: %v %v", a, b)
	}
	costly := in("q3", 1, 1)
	costly.Curve = gaussCurve(10, 1)
	if r := f.apply(f.sign(costly, "agg")); r.Code != CodeBadCharge {
		t.Fatalf("a costed charge in a session: %s", r.Code)
	}
	if r := f.apply(f.sign(in("q4", 2, 0), "agg")); r.Code != CodeSessionExhausted {
		t.Fatalf("third and fourth refusal past K=3: %s", r.Code)
	}
	other := in("q5", 1, 1)
	other.Hospitals = []string{"h1", "h2"}
	if r := f.apply(f.sign(other, "agg")); r.Code != CodeSessionMismatch {
		t.Fatalf("a hospital outside the session: %s", r.Code)
	}
	closeCmd := &CloseSession{SessionID: "svt1", Queries: 100, Answers: 98, Timestamp: f.now()}
	closed := f.must(closeCmd, "agg")
	if r := f.apply(f.sign(closeCmd, "agg")); r.Status != StatusDuplicate || r.Original != closed.Index {
		t.Fatalf("closing again: %s", r.Status)
	}
	if r := f.apply(f.sign(in("q6", 1, 1), "agg")); r.Code != CodeSessionClosed {
		t.Fatalf("after close: %s", r.Code)
	}
	if r := f.apply(f.sign(in("q7", 1, 1), "agg")); r.Code != CodeSessionClosed {
		t.Fatalf("after close: %s", r.Code)
	}
	b := in("q8", 1, 1)
	b.Session = "svt9"
	if r := f.apply(f.sign(b, "agg")); r.Code != CodeUnknownSession {
		t.Fatalf("unknown session: %s", r.Code)
	}
	if a := f.st.Accounts()[0]; a.Answers != 98 || a.Charges != 1 {
		t.Fatalf("h1 answers %d charges %d, want 98 and 1", a.Answers, a.Charges)
	}
}

func TestSnapshotRestore(t *testing.T) {
	build := func() *fed {
		f := newFed(t)
		f.must(chargeBody("b1", []string{"h1", "h3"}, gaussCurve(40, 10), 10), "agg")
		f.apply(f.sign(chargeBody("b2", []string{"h2"}, gaussCurve(1, 10), 10), "agg")) // refused
		f.must(chargeBody("b3", []string{"h1"}, gaussCurve(30, 5), 5), "agg")
		return f
	}
	a, b := build(), build()
	sa, err := a.st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := b.st.Snapshot()
	if !bytes.Equal(sa, sb) {
		t.Fatal("the same commands gave different snapshots")
	}
	// Restore replaces everything, even a state with other content.
	other := newFed(t)
	other.must(chargeBody("x", []string{"h2"}, gaussCurve(40, 1), 1), "agg")
	if err := other.st.Restore(sa); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(viewOf(other.st), viewOf(a.st)) || other.st.RootHash() != a.st.RootHash() || other.st.TreeSize() != a.st.TreeSize() {
		t.Fatal("restored state differs from the snapshotted one")
	}
	again, _ := other.st.Snapshot()
	if !bytes.Equal(again, sa) {
		t.Fatal("snapshot of a restored state differs")
	}
	// A tampered snapshot is refused and changes nothing.
	bad := bytes.Clone(sa)
	bad[len(bad)-3] ^= 0x40
	before := viewOf(other.st)
	if err := other.st.Restore(bad); err == nil {
		t.Fatal("tampered snapshot restored")
	}
	if !reflect.DeepEqual(before, viewOf(other.st)) {
		t.Fatal("a refused restore changed the state")
	}
}

func TestApplyTooLarge(t *testing.T) {
	st := New()
	if _, err := st.Apply(make([]byte, MaxCommandSize+1)); !errors.Is(err, ErrCommandTooLarge) {
		t.Fatalf("got %v", err)
	}
	if st.TreeSize() != 0 {
		t.Fatal("an oversize command was recorded")
	}
}

// near reports whether a ledger figure is the expected one up to the
// ledger's rounding up (CostTolerance), and not below it.
func near(got, want float64) bool {
	return got >= want && got <= want*(1+CostTolerance)
}

// Check gives Apply's decision and changes nothing: the tree does not grow
// and the same command is still accepted afterwards.
func TestCheckChangesNothing(t *testing.T) {
	f := newFed(t)
	size := f.st.TreeSize()
	good := f.sign(&ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 4, CapDelta: 1e-5, Timestamp: f.now()}, "h1")
	for _, tc := range []struct {
		name string
		cmd  []byte
		want Status
		code Code
	}{
		{"a valid change of cap", good, StatusAccepted, 0},
		{"a stale version", f.sign(&ChangeCap{Hospital: "h1", Version: 7, CapEpsilon: 4, CapDelta: 1e-5, Timestamp: f.now()}, "h1"), StatusRefused, CodeStaleCapVersion},
		{"another hospital's signature", f.sign(&ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 4, CapDelta: 1e-5, Timestamp: f.now()}, "h2"), StatusRefused, CodeWrongSigner},
		{"an account already open", f.sign(&OpenAccount{Hospital: "h1", CapEpsilon: 8, CapDelta: 1e-5, Timestamp: f.now()}, "h1"), StatusRefused, CodeAccountExists},
		{"junk", []byte("junk"), StatusRefused, CodeMalformed},
	} {
		r := f.st.Check(tc.cmd)
		if r.Status != tc.want || (tc.want == StatusRefused && r.Code != tc.code) {
			t.Errorf("%s: %s/%s (%s), want %s/%s", tc.name, r.Status, r.Code, r.Message, tc.want, tc.code)
		}
	}
	if f.st.TreeSize() != size {
		t.Fatalf("Check grew the tree from %d to %d", size, f.st.TreeSize())
	}
	if r := f.apply(good); r.Status != StatusAccepted {
		t.Fatalf("after Check, the change is %s: %s", r.Status, r.Message)
	}
}

// Check decides under the state's read lock, so proposers may call it at
// once, charges included (whose parameters fill the cost cache): run with
// -race, this fails if deciding a charge writes shared state unguarded.
func TestCheckConcurrently(t *testing.T) {
	f := newFed(t)
	cmds := make([][]byte, 8)
	for i := range cmds {
		ch := chargeBody(fmt.Sprintf("batch-%d", i), []string{"h1"}, gaussCurve(40+float64(i), 1), 1)
		ch.Params = gnmaxParams(40 + float64(i)) // a list the cache has not seen
		cmds[i] = f.sign(ch, "agg")
	}
	var wg sync.WaitGroup
	for _, cmd := range cmds {
		wg.Go(func() {
			if r := f.st.Check(cmd); r.Status != StatusAccepted {
				t.Errorf("%s/%s: %s", r.Status, r.Code, r.Message)
			}
		})
	}
	wg.Wait()
}

// Batch ids are each student's own: another student's charge under the
// same batch id is its own batch, not a conflict (which told it the id had
// been used); the same student's different content under an id it used is
// still a conflict.
func TestBatchIDsPerStudent(t *testing.T) {
	f := newFed(t)
	curve := gaussCurve(40, 1)
	a := chargeBody("shared", []string{"h1"}, curve, 1)
	f.must(a, "agg")
	b := chargeBody("shared", []string{"h1"}, curve, 1)
	b.Student = "s1"
	f.must(b, "agg")
	c := chargeBody("shared", []string{"h3"}, curve, 1)
	if r := f.apply(f.sign(c, "agg")); r.Code != CodeConflict {
		t.Fatalf("the same student, other content: %s/%s, want conflict", r.Status, r.Code)
	}
}

// A charge in a session pays nothing more because the session paid for its
// mechanism at opening; one naming other parameters (T = 0 and noise 1e-9
// inside a session opened at T = 240, b = 1) is refused by apply, and
// verify names such an entry in a log that holds it.
func TestSessionChargeBoundToItsParameters(t *testing.T) {
	f := newFed(t)
	open := openSession(t, "svt1", "s2", []string{"h1"}, 3)
	open.Timestamp = f.now()
	f.must(open, "agg")
	zero := make([]float64, mechanism.DefaultGrid().Len())
	in := func(batch string, p mechanism.Params) *Charge {
		b := chargeBody(batch, []string{"h1"}, zero, 10)
		b.Session, b.Mechanism, b.Params = "svt1", string(p.Mechanism), p.LedgerParams()
		return b
	}
	weak := svtParams(3)
	weak.Threshold, weak.Scale, weak.DistanceScale = 0, 1e-9, 1e-9
	other := svtParams(3)
	other.Teachers = 500
	for _, tc := range []struct {
		name, batch string
		p           mechanism.Params
	}{
		{"T=0, b_ρ=b_ν=1e-9", "weak", weak},
		{"another ensemble", "other", other},
	} {
		if r := f.apply(f.sign(in(tc.batch, tc.p), "agg")); r.Code != CodeSessionMismatch {
			t.Errorf("a charge in the session naming %s: %s %s, want %s", tc.name, r.Status, r.Code, CodeSessionMismatch)
		}
	}
	f.must(in("honest", svtParams(3)), "agg")

	forged := f.forge(f.sign(in("forged", weak), "agg"))
	export, err := f.st.Export(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Verify(export, VerifyOptions{})
	var named []int64
	for _, c := range r.Failures() {
		if c.Name == "cost" && c.Entry != nil && strings.Contains(c.Detail, "session") {
			named = append(named, *c.Entry)
		}
	}
	if !slices.Equal(named, []int64{forged}) {
		t.Fatalf("verify names entries %v, want the forged session charge %d; failures %+v", named, forged, r.Failures())
	}
}

// Caps are bounded by the genesis: no account picks its own δ to restate
// its spending as a smaller ε, nor an ε without bound. Every account also
// reports its ε at the federation's δ, and lists every cap change, a
// raise flagged.
func TestCapsAreBoundedAndHonest(t *testing.T) {
	// A genesis that states no bounds has the defaults.
	f := newFed(t)
	for _, tc := range []struct {
		name string
		body Body
	}{
		{"a cap δ of 0.5", &ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 8, CapDelta: 0.5}},
		{"a cap δ just above the bound", &ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 8, CapDelta: DefaultDeltaBound * 1.01}},
		{"a cap ε of 1e300", &ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 1e300, CapDelta: 1e-5}},
		{"a cap ε above the bound", &ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: DefaultEpsilonBound + 1, CapDelta: 1e-5}},
	} {
		if r := f.apply(f.sign(tc.body, "h1")); r.Code != CodeBadCap {
			t.Errorf("%s: %s %s, want %s", tc.name, r.Status, r.Code, CodeBadCap)
		}
	}
	// The refusals changed nothing.
	if a, _ := f.st.Account("h1"); a.CapDelta != 1e-5 || a.CapEpsilon != 8 || a.CapVersion != 0 || len(a.CapChanges) != 0 {
		t.Fatalf("after refused cap changes: %+v", a)
	}

	// h2's cap names δ = 1e-6: its ε there is larger than at the
	// federation's 1e-5, and both are reported.
	f.must(chargeBody("b1", []string{"h1", "h2"}, gaussCurve(40, 100), 100), "agg")
	h1, _ := f.st.Account("h1")
	h2, _ := f.st.Account("h2")
	if h1.FederationDelta != DefaultDeltaBound || h1.EpsilonAtFederationDelta != h1.Epsilon {
		t.Fatalf("h1, capped at the federation's δ: ε %v at its cap, %v at the federation's δ %v", h1.Epsilon, h1.EpsilonAtFederationDelta, h1.FederationDelta)
	}
	if !(h2.EpsilonAtFederationDelta < h2.Epsilon) || h2.EpsilonAtFederationDelta != h1.Epsilon {
		t.Fatalf("h2 at δ 1e-6: ε %v at its cap, %v at the federation's δ; h1's %v", h2.Epsilon, h2.EpsilonAtFederationDelta, h1.Epsilon)
	}

	// Changes are listed: who, when, from → to, a raise flagged.
	lower := f.must(&ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 4, CapDelta: 1e-6, Timestamp: f.now()}, "h1")
	raise := &ChangeCap{Hospital: "h1", Version: 2, CapEpsilon: 6, CapDelta: 1e-6, Timestamp: f.now()}
	raised := f.must(raise, "h1")
	a, _ := f.st.Account("h1")
	want := []CapChange{
		{Entry: lower.Index, Timestamp: raise.Timestamp - 1_000_000, Version: 1, Signer: "h1", FromEpsilon: 8, FromDelta: 1e-5, ToEpsilon: 4, ToDelta: 1e-6},
		{Entry: raised.Index, Timestamp: raise.Timestamp, Version: 2, Signer: "h1", FromEpsilon: 4, FromDelta: 1e-6, ToEpsilon: 6, ToDelta: 1e-6, Raise: true},
	}
	if !reflect.DeepEqual(a.CapChanges, want) {
		t.Fatalf("cap changes %+v, want %+v", a.CapChanges, want)
	}
	if s := a.String(); !strings.Contains(s, "2 cap changes, 1 of them raises") || !strings.Contains(s, "at the federation's δ=1e-05") {
		t.Fatalf("account text %q", s)
	}
	if s := want[1].String(); !strings.Contains(s, "RAISED") || !strings.Contains(s, "ε=4 δ=1e-06 → ε=6 δ=1e-06") {
		t.Fatalf("cap change text %q", s)
	}
	// A replay and a restored snapshot list the same changes.
	restored := restoredCopy(t, f.st)
	if b, _ := restored.Account("h1"); !reflect.DeepEqual(b.CapChanges, want) || b.FederationDelta != DefaultDeltaBound {
		t.Fatalf("restored cap changes %+v, federation δ %v", b.CapChanges, b.FederationDelta)
	}
	if r := restored.Check(f.sign(&ChangeCap{Hospital: "h1", Version: 3, CapEpsilon: 6, CapDelta: 0.5}, "h1")); r.Code != CodeBadCap {
		t.Fatalf("a restored replica takes a cap δ of 0.5: %s %s", r.Status, r.Code)
	}

	// A genesis that states bounds has them.
	g := &fed{t: t, st: New(), ts: 1_700_000_000_000_000_000}
	g.must(boundedGenesis(10, 1e-6), "admin")
	if r := g.apply(g.sign(&OpenAccount{Hospital: "h1", CapEpsilon: 8, CapDelta: 1e-5}, "h1")); r.Code != CodeBadCap {
		t.Fatalf("a cap δ of 1e-5 under a bound of 1e-6: %s %s", r.Status, r.Code)
	}
	if r := g.apply(g.sign(&OpenAccount{Hospital: "h1", CapEpsilon: 11, CapDelta: 1e-6}, "h1")); r.Code != CodeBadCap {
		t.Fatalf("a cap ε of 11 under a bound of 10: %s %s", r.Status, r.Code)
	}
	g.must(&OpenAccount{Hospital: "h1", CapEpsilon: 10, CapDelta: 1e-6}, "h1")
	if a, _ := g.st.Account("h1"); a.FederationDelta != 1e-6 {
		t.Fatalf("federation δ %v, want the genesis's 1e-6", a.FederationDelta)
	}
}
