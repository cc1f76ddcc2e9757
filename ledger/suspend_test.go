package ledger

import (
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

// TestSuspend holds a suspended hospital's account to no spending at all:
// charges (in a session or not), reservations and session openings naming
// it are refused until an administrator reinstates it, and only an
// administrator's next-version command changes its state.
func TestSuspend(t *testing.T) {
	f := newFed(t)
	f.must(openSession(t, "svt-open", "s2", []string{"h1", "h3"}, 5), "agg")
	susp := &Suspend{Hospital: "h3", Version: 1, Suspended: true, Reason: "sessions burnt without answers"}
	for _, tc := range []struct {
		name   string
		body   Body
		signer string
		code   Code
	}{
		{"by a hospital", susp, "h3", CodeWrongSigner},
		{"by the aggregator", susp, "agg", CodeWrongSigner},
		{"of an unknown hospital", &Suspend{Hospital: "h9", Version: 1, Suspended: true}, "admin", CodeUnknownHospital},
		{"of a student", &Suspend{Hospital: "s2", Version: 1, Suspended: true}, "admin", CodeUnknownHospital},
		{"version 2 first", &Suspend{Hospital: "h3", Version: 2, Suspended: true}, "admin", CodeStaleSuspension},
		{"reinstating an unsuspended hospital", &Suspend{Hospital: "h3", Version: 1}, "admin", CodeStaleSuspension},
	} {
		if r := f.apply(f.sign(tc.body, tc.signer)); r.Status != StatusRefused || r.Code != tc.code {
			t.Fatalf("suspension %s: %+v, want refused %s", tc.name, r.Outcome, tc.code)
		}
	}
	if a, _ := f.st.Account("h3"); a.Suspended {
		t.Fatal("a refused suspension suspended the account")
	}
	signed := f.sign(susp, "admin")
	if r := f.apply(signed); r.Status != StatusAccepted {
		t.Fatalf("suspension: %+v %s", r.Outcome, r.Message)
	}
	if r := f.apply(signed); r.Status != StatusRefused || r.Code != CodeStaleSuspension {
		t.Fatalf("replayed suspension: %+v, want stale-suspension", r.Outcome)
	}
	a, _ := f.st.Account("h3")
	if !a.Suspended || a.SuspendedReason != susp.Reason {
		t.Fatalf("account after suspension: suspended=%v reason=%q", a.Suspended, a.SuspendedReason)
	}
	inSession := chargeBody("in-svt", []string{"h1", "h3"}, make([]float64, mechanism.DefaultGrid().Len()), 1)
	inSession.Session, inSession.Mechanism, inSession.Params = "svt-open", "nzc-svt", svtParams(5).LedgerParams()
	refusedAll := []struct {
		name string
		body Body
	}{
		{"charge", chargeBody("b-h3", []string{"h1", "h3"}, gaussCurve(40, 10), 10)},
		{"charge in an open session", inSession},
		{"reservation", reserveBody("r-h3", []string{"h3"}, 10)},
		{"session opening", openSession(t, "svt-2", "s2", []string{"h2", "h3"}, 5)},
	}
	for _, tc := range refusedAll {
		if r := f.apply(f.sign(tc.body, "agg")); r.Status != StatusRefused || r.Code != CodeSuspended || r.Subject != "h3" {
			t.Fatalf("%s naming suspended h3: %+v %s, want refused suspended", tc.name, r.Outcome, r.Message)
		}
	}
	// The other hospitals are untouched.
	f.must(chargeBody("b-h1", []string{"h1"}, gaussCurve(40, 10), 10), "agg")
	f.must(&Suspend{Hospital: "h3", Version: 2, Reason: "ensemble retrained"}, "admin")
	if a, _ := f.st.Account("h3"); a.Suspended {
		t.Fatal("reinstated account still suspended")
	}
	f.must(chargeBody("b-h3-again", []string{"h3"}, gaussCurve(40, 10), 10), "agg")
	if sp := f.st.Suspensions(); len(sp) != 1 || sp[0].Suspended || sp[0].Version != 2 {
		t.Fatalf("suspensions: %+v", sp)
	}
}

// TestSuspendReplays checks that a replica replaying the log, or restoring a
// snapshot, holds the same suspensions.
func TestSuspendReplays(t *testing.T) {
	f := newFed(t)
	f.must(&Suspend{Hospital: "h2", Version: 1, Suspended: true, Reason: "burning"}, "admin")
	snap, err := f.st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	st := New()
	if err := st.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if a, _ := st.Account("h2"); !a.Suspended || a.SuspendedReason != "burning" {
		t.Fatalf("restored account: suspended=%v reason=%q", a.Suspended, a.SuspendedReason)
	}
}
