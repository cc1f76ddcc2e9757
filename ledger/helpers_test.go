package ledger

import (
	"crypto/ed25519"
	"crypto/sha256"
	"math"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/mechanism"
)

// testKey derives a fixed key from a name, so golden files are stable.
func testKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("nzc ledger test key " + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

func testParty(id string, role Role) Party {
	return Party{ID: id, Role: role, PublicKey: testKey(id).Public().(ed25519.PublicKey)}
}

const testOrigin = "nzc.test/ledger"

// fed is a test federation: admin, aggregator agg, hospitals h1–h3, students
// s1 and s2, auditors a1–a3.
type fed struct {
	t  testing.TB
	st *State
	ts int64
}

func genesisBody() *Genesis {
	ps := []Party{
		testParty("a1", RoleAuditor), testParty("a2", RoleAuditor), testParty("a3", RoleAuditor),
		testParty("admin", RoleAdmin), testParty("agg", RoleAggregator),
		testParty("h1", RoleHospital), testParty("h2", RoleHospital), testParty("h3", RoleHospital),
		testParty("s1", RoleStudent), testParty("s2", RoleStudent),
	}
	slices.SortFunc(ps, func(a, b Party) int { return strings.Compare(a.ID, b.ID) })
	return &Genesis{Origin: testOrigin, Parties: ps, Timestamp: 1_700_000_000_000_000_000}
}

func (f *fed) sign(b Body, signer string) []byte {
	f.t.Helper()
	cmd, err := Sign(b, signer, testKey(signer))
	if err != nil {
		f.t.Fatalf("sign %s: %v", b.Kind(), err)
	}
	return cmd
}

func (f *fed) apply(cmd []byte) Result {
	f.t.Helper()
	r, err := f.st.Apply(cmd)
	if err != nil {
		f.t.Fatalf("apply: %v", err)
	}
	return r
}

func (f *fed) must(b Body, signer string) Result {
	f.t.Helper()
	r := f.apply(f.sign(b, signer))
	if r.Status != StatusAccepted {
		f.t.Fatalf("%s by %s: %s/%s: %s", b.Kind(), signer, r.Status, r.Code, r.Message)
	}
	return r
}

func (f *fed) now() int64 { f.ts += 1_000_000; return f.ts }

// newFed returns a federation with accounts for h1 (ε 8, δ 1e-5), h2 (ε 2,
// δ 1e-6) and h3 (ε 4, δ 1e-5), students s1 (quota 100) and s2 (no quota).
func newFed(t testing.TB) *fed {
	f := &fed{t: t, st: New(), ts: 1_700_000_000_000_000_000}
	f.must(genesisBody(), "admin")
	f.must(&OpenAccount{Hospital: "h1", CapEpsilon: 8, CapDelta: 1e-5, Timestamp: f.now()}, "h1")
	f.must(&OpenAccount{Hospital: "h2", CapEpsilon: 2, CapDelta: 1e-6, Timestamp: f.now()}, "h2")
	f.must(&OpenAccount{Hospital: "h3", CapEpsilon: 4, CapDelta: 1e-5, Timestamp: f.now()}, "h3")
	f.must(&RegisterStudent{Student: "s1", MaxAnswers: 100, Timestamp: f.now()}, "admin")
	f.must(&RegisterStudent{Student: "s2", Timestamp: f.now()}, "admin")
	return f
}

// gaussCurve is the RDP curve of k GNMax answers with noise σ.
func gaussCurve(sigma float64, k int) []float64 {
	g := mechanism.DefaultGrid()
	return mechanism.Gaussian(g, math.Sqrt2, sigma).Times(k).Values()
}

func chargeBody(batch string, hospitals []string, curve []float64, answers uint64) *Charge {
	return &Charge{
		BatchID:     batch,
		Student:     "s2",
		Hospitals:   hospitals,
		Mechanism:   "gnmax",
		Params:      gnmaxParams(40),
		Queries:     answers,
		Answers:     answers,
		Curve:       curve,
		AnswersHash: sha256.Sum256([]byte(batch)),
		Timestamp:   1_700_000_001_000_000_000,
	}
}

type (
	noteSigner  = note.Signer
	edPublicKey = ed25519.PublicKey
)

// gnmaxParams are the ledger parameters of GNMax with noise σ for 250
// teachers voting on 10 classes.
func gnmaxParams(sigma float64) []Param {
	return mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: sigma}.LedgerParams()
}

// svtParams are the ledger parameters of an nzc-svt session with K = k for
// 250 teachers voting on 10 classes: ε = 2, δ below 1e-9 for k ≤ 5.
func svtParams(k int) mechanism.Params {
	return mechanism.Params{Mechanism: mechanism.NZCSVT, Teachers: 250, Classes: 10, Scale: 1, Threshold: 240, MaxRefusals: k}
}

// openSession is a session of svtParams(k) stating its true cost.
func openSession(t testing.TB, id, student string, hospitals []string, k int) *OpenSession {
	t.Helper()
	p := svtParams(k)
	c, err := p.Charge(mechanism.DefaultGrid(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &OpenSession{SessionID: id, Student: student, Hospitals: hospitals, Mechanism: string(p.Mechanism),
		Params: p.LedgerParams(), MaxRefusals: uint64(k), Curve: c.RDP.Values(), Delta: c.Delta}
}

// testCosignTime is the time of the test auditors' cosignatures.
const testCosignTime = 1_700_000_000

// restoredCopy is a new state restored from st's snapshot.
func restoredCopy(t testing.TB, st *State) *State {
	t.Helper()
	snap, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	restored := New()
	if err := restored.Restore(snap); err != nil {
		t.Fatal(err)
	}
	return restored
}

// gnmaxEpsilon is the ε at δ 1e-5 of q GNMax (σ 40) answers on the default
// grid, as an account's gate reads it.
func gnmaxEpsilon(t *testing.T, q int) float64 {
	t.Helper()
	c, err := mechanism.DefaultGrid().CurveOf(gaussCurve(40, q))
	if err != nil {
		t.Fatal(err)
	}
	conv, err := c.FilterEpsilon(1e-5)
	if err != nil {
		t.Fatal(err)
	}
	return conv.Epsilon
}
