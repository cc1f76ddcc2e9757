package ledger

import "testing"

// shareQueries is a number of GNMax (σ 40) answers whose ε at δ 1e-5 is
// below 4 (half of h1's cap of 8) and twice which is above 4 and below 8.
func shareQueries(t *testing.T) int {
	t.Helper()
	eps := func(q int) float64 { return gnmaxEpsilon(t, q) }
	for q := 100; q < 100_000; q += 100 {
		if e, e2 := eps(q), eps(2*q); e > 2 && e < 4 && e2 > 4.5 && e2 < 7.5 {
			return q
		}
	}
	t.Fatal("no batch size fits half the cap once and the cap, not half, twice")
	return 0
}

// shareFed is newFed under a genesis-v3 fixing the student share (0: a
// genesis-v2 with the same bounds, stating none).
func shareFed(t *testing.T, share float64) *fed {
	f := &fed{t: t, st: New(), ts: 1_700_000_000_000_000_000}
	g := boundedGenesis(DefaultEpsilonBound, DefaultDeltaBound)
	g.StudentShare = share
	f.must(g, "admin")
	f.must(&OpenAccount{Hospital: "h1", CapEpsilon: 8, CapDelta: 1e-5, Timestamp: f.now()}, "h1")
	f.must(&RegisterStudent{Student: "s1", Timestamp: f.now()}, "admin")
	f.must(&RegisterStudent{Student: "s2", Timestamp: f.now()}, "admin")
	return f
}

// No single student spends more than the genesis's share of a hospital's
// cap: with a share of ½, a student's second batch, which would take its ε
// of h1 past 4 of the cap of 8, is refused — as a charge and as a
// reservation — with share-exceeded naming the hospital, while another
// student's batch of the same size is admitted; a student's live
// reservation counts as its spending. A genesis stating no share (every
// ledger begun before shares) admits both batches, as it did.
func TestStudentShareOfACap(t *testing.T) {
	q := shareQueries(t)
	charge := func(f *fed, batch, student string) Result {
		c := chargeBody(batch, []string{"h1"}, gaussCurve(40, q), uint64(q))
		c.Student, c.Timestamp = student, f.now()
		return f.apply(f.sign(c, "agg"))
	}
	reserve := func(f *fed, batch, student string) Result {
		r := reserveBody(batch, []string{"h1"}, q)
		r.Student, r.Timestamp = student, f.now()
		return f.apply(f.sign(r, "agg"))
	}
	refusedForShare := func(t *testing.T, what string, r Result) {
		t.Helper()
		if r.Status != StatusRefused || r.Code != CodeShareExceeded || r.Subject != "h1" || !r.Code.Budgetary() {
			t.Fatalf("%s: %s/%s (%s) %s, want refused share-exceeded naming h1", what, r.Status, r.Code, r.Subject, r.Message)
		}
	}
	t.Run("half", func(t *testing.T) {
		f := shareFed(t, 0.5)
		if r := charge(f, "s2-a", "s2"); r.Status != StatusAccepted {
			t.Fatalf("s2's first batch: %s/%s %s", r.Status, r.Code, r.Message)
		}
		refusedForShare(t, "s2's second batch", charge(f, "s2-b", "s2"))
		refusedForShare(t, "s2's second reservation", reserve(f, "s2-c", "s2"))
		if r := reserve(f, "s1-a", "s1"); r.Status != StatusAccepted {
			t.Fatalf("s1's reservation, of its own share: %s/%s %s", r.Status, r.Code, r.Message)
		}
		// s1's live reservation counts as its spending.
		refusedForShare(t, "s1's batch beside its reservation", charge(f, "s1-b", "s1"))
		if r := charge(f, "s1-a", "s1"); r.Status != StatusAccepted {
			t.Fatalf("s1's batch within its reservation: %s/%s %s", r.Status, r.Code, r.Message)
		}
		if got := restoredCopy(t, f.st); got.RootHash() != f.st.RootHash() {
			t.Fatal("a replica restored from the log decides otherwise")
		}
	})
	t.Run("none stated", func(t *testing.T) {
		f := shareFed(t, 0)
		for _, b := range []string{"s2-a", "s2-b"} {
			if r := charge(f, b, "s2"); r.Status != StatusAccepted {
				t.Fatalf("batch %s under a genesis without a share: %s/%s %s", b, r.Status, r.Code, r.Message)
			}
		}
	})
}

// A student share outside (0, 1], or stated without cap bounds, does not
// encode.
func TestStudentShareBounds(t *testing.T) {
	for _, share := range []float64{-0.5, 1.5} {
		g := boundedGenesis(DefaultEpsilonBound, DefaultDeltaBound)
		g.StudentShare = share
		if _, err := Sign(g, "admin", testKey("admin")); err == nil {
			t.Errorf("share %v signed", share)
		}
	}
	g := genesisBody()
	g.StudentShare = 0.5
	if _, err := Sign(g, "admin", testKey("admin")); err == nil {
		t.Error("a share without cap bounds signed")
	}
}
