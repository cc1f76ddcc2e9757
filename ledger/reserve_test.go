package ledger

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

// halfCapQueries is a number of GNMax (σ 40) answers whose ε alone fits
// h1's cap of 8 at δ 1e-5, and twice which does not.
func halfCapQueries(t *testing.T) int {
	t.Helper()
	eps := func(q int) float64 { return gnmaxEpsilon(t, q) }
	for q := 100; q < 100_000; q += 100 {
		if e := eps(q); e > 5 && e < 7.5 && eps(2*q) > 8.5 {
			return q
		}
	}
	t.Fatal("no batch size fits the cap once and not twice")
	return 0
}

func reserveBody(batch string, hospitals []string, queries int) *Reserve {
	return &Reserve{BatchID: batch, Student: "s2", Hospitals: hospitals, Mechanism: "gnmax", Params: gnmaxParams(40),
		Queries: uint64(queries), Curve: gaussCurve(40, queries)}
}

// Budget before votes: a reservation holds a batch's worst case against
// its hospitals' caps, so two concurrent batches that together would pass
// a cap cannot both be admitted; the one admitted settles within its
// reservation; an unsettled reservation expires after ReservationWindow
// entries and is released; every replica decides alike.
func TestReservationHoldsTheWorstCaseBeforeVotes(t *testing.T) {
	q := halfCapQueries(t)
	f := newFed(t)
	a := reserveBody("a", []string{"h1", "h2"}, q/8)
	a.Queries, a.Curve = uint64(q), gaussCurve(40, q)
	a.Hospitals = []string{"h1"}
	a.Timestamp = f.now()
	first := f.must(a, "agg")
	if r := f.apply(f.sign(a, "agg")); r.Status != StatusDuplicate || r.Original != first.Index {
		t.Fatalf("the same reservation again: %s original %d", r.Status, r.Original)
	}
	// The second batch of the same size, reserved before the first is
	// charged, is refused at its reservation, naming the hospital that
	// cannot pay; nothing realized is in its entry.
	b := reserveBody("b", []string{"h1"}, q)
	if r := f.apply(f.sign(b, "agg")); r.Code != CodeCapExceeded || r.Subject != "h1" {
		t.Fatalf("a second half-cap reservation: %s %s %q, want cap-exceeded naming h1", r.Status, r.Code, r.Subject)
	}
	// An unreserved charge is gated with the live reservations counted.
	if r := f.apply(f.sign(chargeBody("c", []string{"h1"}, gaussCurve(40, q), uint64(q)), "agg")); r.Code != CodeCapExceeded {
		t.Fatalf("an unreserved half-cap charge beside a live reservation: %s %s", r.Status, r.Code)
	}
	// The first batch settles within its reservation, for fewer queries
	// than it held (the student's batch was cut short), and releases it.
	before, _ := f.st.Account("h1")
	r := f.must(chargeBody("a", []string{"h1"}, gaussCurve(40, q/4), uint64(q/4)), "agg")
	if !strings.Contains(r.Message, fmt.Sprintf("within its reservation at entry %d", first.Index)) {
		t.Fatalf("settled: %q", r.Message)
	}
	after, _ := f.st.Account("h1")
	if after.Charges != before.Charges+1 || after.Answers != before.Answers+uint64(q/4) {
		t.Fatalf("settling: h1 %+v → %+v", before, after)
	}
	if _, held := f.st.reservations[a.key()]; held {
		t.Fatal("the settled reservation is still held")
	}
	if r := f.apply(f.sign(reserveBody("a", []string{"h1"}, 1), "agg")); r.Code != CodeConflict {
		t.Fatalf("reserving a charged batch: %s %s", r.Status, r.Code)
	}

	// A reservation that is never settled expires and is released.
	g := newFed(t)
	x := g.must(reserveBody("x", []string{"h1"}, q), "agg")
	if r := g.apply(g.sign(reserveBody("y", []string{"h1"}, q), "agg")); r.Code != CodeCapExceeded {
		t.Fatalf("beside a live reservation: %s %s", r.Status, r.Code)
	}
	for uint64(g.st.TreeSize()) < x.Index+ReservationWindow-1 {
		g.apply([]byte("not a command")) // entries, refused
	}
	if r := g.apply(g.sign(reserveBody("y", []string{"h1"}, q), "agg")); r.Code != CodeCapExceeded {
		t.Fatalf("at the last entry x's reservation is live: %s %s", r.Status, r.Code)
	}
	y := g.must(reserveBody("y", []string{"h1"}, q), "agg")
	// The expired batch's late charge is gated afresh, with y held.
	if r := g.apply(g.sign(chargeBody("x", []string{"h1"}, gaussCurve(40, q), uint64(q)), "agg")); r.Code != CodeCapExceeded {
		t.Fatalf("the charge of an expired reservation beside a live one: %s %s", r.Status, r.Code)
	}
	if len(g.st.reserveQueue) != 1 || g.st.reserveQueue[0].index != y.Index {
		t.Fatalf("queue %+v, want only y's reservation", g.st.reserveQueue)
	}
	// A replica restored from a snapshot decides the same.
	c := restoredCopy(t, g.st)
	if r := c.Check(g.sign(reserveBody("z", []string{"h1"}, q), "agg")); r.Code != CodeCapExceeded {
		t.Fatalf("restored replica: %s %s", r.Status, r.Code)
	}
	if !slices.Equal(c.reserveQueue, g.st.reserveQueue) {
		t.Fatalf("restored queue %+v, want %+v", c.reserveQueue, g.st.reserveQueue)
	}
}

// A charge that does not fit its reservation (more queries, another
// hospital, another mechanism) is gated as if unreserved.
func TestChargeOutsideItsReservationIsGated(t *testing.T) {
	q := halfCapQueries(t)
	f := newFed(t)
	f.must(reserveBody("a", []string{"h1"}, q), "agg")
	f.must(reserveBody("b", []string{"h3"}, 1), "agg")
	// Batch b's reservation names h3 only: its charge naming h1 too is
	// gated afresh, and a's live reservation leaves h1 no room.
	if r := f.apply(f.sign(chargeBody("b", []string{"h1", "h3"}, gaussCurve(40, q), uint64(q)), "agg")); r.Code != CodeCapExceeded || r.Subject != "h1" {
		t.Fatalf("a charge outside its reservation: %s %s %q", r.Status, r.Code, r.Subject)
	}
	if r := f.must(chargeBody("b", []string{"h3"}, gaussCurve(40, 1), 1), "agg"); !strings.Contains(r.Message, "within its reservation") {
		t.Fatalf("b within its reservation: %q", r.Message)
	}
}

// Verification recomputes a reservation's worst case and names one that
// states less.
func TestVerifyNamesAnUnderCostReservation(t *testing.T) {
	f := newFed(t)
	under := reserveBody("u", []string{"h1"}, 100)
	under.Curve = gaussCurve(40, 1)
	forged := f.forge(f.sign(under, "agg"))
	export, err := f.st.Export(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Verify(export, VerifyOptions{})
	for _, c := range r.Failures() {
		if c.Name == "cost" && c.Entry != nil && *c.Entry == forged && strings.Contains(c.Detail, "under-cost") {
			return
		}
	}
	t.Fatalf("verify does not name the under-cost reservation at entry %d: %+v", forged, r.Failures())
}

// A student's live reservations hold its answer quota as they hold the
// hospitals' caps: two batches reserved at once whose worst cases
// together pass the quota cannot both be admitted, so the second is
// refused at its reservation, before any hospital is asked to vote; the
// first settles within its reservation; a restored replica and the
// verifier's replay decide alike.
func TestReservationHoldsTheStudentQuota(t *testing.T) {
	// s1's quota is 100 answers.
	reserve := func(batch string, queries int) *Reserve {
		r := reserveBody(batch, []string{"h1"}, queries)
		r.Student = "s1"
		return r
	}
	charge := func(batch string, queries, answers int) *Charge {
		c := chargeBody(batch, []string{"h1"}, gaussCurve(40, answers), uint64(answers))
		c.Student, c.Queries = "s1", uint64(queries)
		return c
	}
	f := newFed(t)
	f.must(reserve("a", 60), "agg")
	if r := f.apply(f.sign(reserve("b", 60), "agg")); r.Code != CodeQuotaExceeded || r.Subject != "s1" {
		t.Fatalf("a second reservation passing the quota beside a live one: %s %s %q, want quota-exceeded naming s1", r.Status, r.Code, r.Subject)
	}
	// Replacing a's reservation does not count a's old one.
	if r := f.apply(f.sign(reserve("a", 100), "agg")); r.Status != StatusAccepted {
		t.Fatalf("a's reservation replaced at the whole quota: %s %s %s", r.Status, r.Code, r.Message)
	}
	f.must(reserve("a", 60), "agg")
	// An unreserved charge is gated with the live reservation counted.
	if r := f.apply(f.sign(charge("c", 41, 0), "agg")); r.Code != CodeQuotaExceeded {
		t.Fatalf("an unreserved charge beside a live reservation passing the quota: %s %s", r.Status, r.Code)
	}
	f.must(reserve("b", 40), "agg")
	// A restored replica counts the same reservations.
	c := restoredCopy(t, f.st)
	for _, st := range []*State{f.st, c} {
		if r := st.Check(f.sign(reserve("d", 1), "agg")); r.Code != CodeQuotaExceeded {
			t.Fatalf("a reservation beyond the whole quota held: %s %s", r.Status, r.Code)
		}
	}
	// Each batch settles within its reservation, at its worst case.
	if r := f.must(charge("a", 60, 60), "agg"); !strings.Contains(r.Message, "within its reservation") {
		t.Fatalf("a: %q", r.Message)
	}
	if r := f.must(charge("b", 40, 40), "agg"); !strings.Contains(r.Message, "within its reservation") {
		t.Fatalf("b: %q", r.Message)
	}
	if q, _ := f.st.Student("s1"); q.Answers != 100 {
		t.Fatalf("s1 has %d answers, want 100", q.Answers)
	}
	export, err := f.st.Export(nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := Verify(export, VerifyOptions{Unpinned: true}); r.Replayed != r.Entries {
		t.Fatalf("verify replayed %d of %d entries: %+v", r.Replayed, r.Entries, r.Failures())
	}
	// A log that records a reservation over the quota as accepted does not
	// replay.
	g := newFed(t)
	g.must(reserve("a", 60), "agg")
	forged := g.forge(g.sign(reserve("b", 60), "agg"))
	export, err = g.st.Export(nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := Verify(export, VerifyOptions{Unpinned: true}); r.Replayed != forged {
		t.Fatalf("verify replayed %d entries, want it to stop at the forged reservation %d: %+v", r.Replayed, forged, r.Failures())
	}
}

// A batch of a session mechanism reserves its queries against the
// student's quota and nothing against the caps (its session paid at
// opening): of two such batches at once that together pass the quota, the
// second is refused at its reservation; the first's charge in its session
// settles the reservation.
func TestSessionBatchReservesItsQuota(t *testing.T) {
	zero := make([]float64, mechanism.DefaultGrid().Len())
	reserve := func(batch string, queries int) *Reserve {
		return &Reserve{BatchID: batch, Student: "s1", Hospitals: []string{"h1"}, Mechanism: "nzc-svt", Params: svtParams(3).LedgerParams(),
			Queries: uint64(queries), Curve: zero}
	}
	f := newFed(t)
	f.must(openSession(t, "svt1", "s1", []string{"h1"}, 3), "agg")
	before, _ := f.st.Account("h1")
	f.must(reserve("a", 60), "agg")
	if after, _ := f.st.Account("h1"); after.Epsilon != before.Epsilon {
		t.Fatalf("a session batch's reservation held ε: %v → %v", before.Epsilon, after.Epsilon)
	}
	if r := f.apply(f.sign(reserve("b", 60), "agg")); r.Code != CodeQuotaExceeded || r.Subject != "s1" {
		t.Fatalf("a second session batch passing the quota beside a live one: %s %s %q, want quota-exceeded naming s1", r.Status, r.Code, r.Subject)
	}
	costly := reserve("c", 1)
	costly.Curve = gaussCurve(40, 1)
	if r := f.apply(f.sign(costly, "agg")); r.Code != CodeBadCharge {
		t.Fatalf("a session batch reserving a cost: %s %s", r.Status, r.Code)
	}
	charge := chargeBody("a", []string{"h1"}, zero, 60)
	charge.Student, charge.Session, charge.Mechanism, charge.Params = "s1", "svt1", "nzc-svt", svtParams(3).LedgerParams()
	f.must(charge, "agg")
	if _, held := f.st.reservations[reserve("a", 60).key()]; held {
		t.Fatal("the settled reservation is still held")
	}
	f.must(reserve("b", 40), "agg")
	export, err := f.st.Export(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Verify(export, VerifyOptions{Unpinned: true})
	if r.Replayed != r.Entries {
		t.Fatalf("verify replayed %d of %d entries: %+v", r.Replayed, r.Entries, r.Failures())
	}
	for _, c := range r.Failures() {
		if c.Name == "cost" {
			t.Fatalf("verify: %s", c.Detail)
		}
	}
}
