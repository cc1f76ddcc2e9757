package dashboard

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nzcfed/nzc/internal/jsonnum"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/internal/fedtest"
)

// testKeys are the parties' keys.
const testKeys = fedtest.Keys("dashboard test key ")

var auditorIDs = []string{"a1", "a2", "a3"}

// fed is a ledger with three auditors, an aggregator, hospitals h1 (cap
// ε 2) and h2 (cap ε 5), and a student.
type fed struct {
	t  testing.TB
	st *ledger.State
	ts int64
}

func newFed(t *testing.T) *fed { return newFedWithCaps(t, 2, 5) }

// newFedWithCaps is the federation with caps ε1 for h1 and ε2 for h2.
func newFedWithCaps(tb testing.TB, ε1, ε2 float64) *fed {
	f := &fed{t: tb, st: ledger.New(), ts: 1_700_000_000_000_000_000}
	f.must(testKeys.Genesis("test.nzc/dashboard", f.now(), "h1", "h2"), "admin")
	f.must(&ledger.OpenAccount{Hospital: "h1", CapEpsilon: ε1, CapDelta: 1e-5, Timestamp: f.now()}, "h1")
	f.must(&ledger.OpenAccount{Hospital: "h2", CapEpsilon: ε2, CapDelta: 1e-5, Timestamp: f.now()}, "h2")
	f.must(&ledger.RegisterStudent{Student: "s1", Timestamp: f.now()}, "admin")
	return f
}

func (f *fed) now() int64 { f.ts += int64(time.Second); return f.ts }

func (f *fed) apply(b ledger.Body, signer string) ledger.Result {
	f.t.Helper()
	cmd, err := ledger.Sign(b, signer, testKeys.Key(signer))
	if err != nil {
		f.t.Fatal(err)
	}
	r, err := f.st.Apply(cmd)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fed) must(b ledger.Body, signer string) {
	f.t.Helper()
	if r := f.apply(b, signer); r.Status != ledger.StatusAccepted {
		f.t.Fatalf("%s: %s %s", b.Kind(), r.Code, r.Message)
	}
}

func (f *fed) charge(batch string, hospitals []string, answers int) ledger.Result {
	f.t.Helper()
	curve := mechanism.Gaussian(mechanism.DefaultGrid(), math.Sqrt2, 40).Times(answers)
	return f.apply(&ledger.Charge{BatchID: batch, Student: "s1", Hospitals: hospitals, Mechanism: "gnmax",
		Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 40}.LedgerParams(), Queries: uint64(answers), Answers: uint64(answers),
		Curve: curve.Values(), AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: f.now()}, "agg")
}

// cosign signs the state's latest checkpoint with the given auditors' keys,
// like an auditor node gathering its peers' signatures.
func (f *fed) cosign(signers ...string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { return testKeys.Cosign(f.st, signers...) }
}

// busy is a ledger with charges to both hospitals and a refusal of h1's cap.
func busy(t *testing.T) *fed {
	f := newFed(t)
	for i, hs := range [][]string{{"h1", "h2"}, {"h1"}, {"h2"}, {"h1", "h2"}} {
		if r := f.charge("batch-"+string(rune('a'+i)), hs, 20); r.Status != ledger.StatusAccepted {
			t.Fatalf("charge %d: %s", i, r.Message)
		}
	}
	if r := f.charge("too-big", []string{"h1", "h2"}, 100000); r.Code != ledger.CodeCapExceeded || r.Subject != "h1" {
		t.Fatalf("over-cap charge: %+v", r)
	}
	return f
}

func get(t *testing.T, h http.Handler, path string, into any) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:7800"+path, nil))
	if into != nil {
		if rec.Code != 200 {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), into); err != nil {
			t.Fatalf("GET %s: %v\n%s", path, err, rec.Body)
		}
	}
	return rec
}

func newDashboard(t *testing.T, src Source, opts Options) *Dashboard {
	t.Helper()
	d, err := New(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPageAndAssets(t *testing.T) {
	f := newFed(t)
	d := newDashboard(t, LedgerSource(f.st, f.cosign(auditorIDs...)), Options{})
	for _, tc := range []struct {
		path, ctype, contains string
	}{
		{"/", "text/html", `<script src="assets/app.js" defer></script>`},
		{"/assets/app.js", "text/javascript", "api/verification"},
		{"/assets/style.css", "text/css", ".card"},
		{"/assets/favicon.svg", "image/svg+xml", "<svg"},
	} {
		rec := get(t, d, tc.path, nil)
		if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), tc.ctype) || !strings.Contains(rec.Body.String(), tc.contains) {
			t.Errorf("GET %s: %d %q, want %s containing %q", tc.path, rec.Code, rec.Header().Get("Content-Type"), tc.ctype, tc.contains)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: CSP %q", tc.path, csp)
		}
	}
	// Nothing in the page or its script reaches outside the dashboard.
	for _, p := range []string{"/", "/assets/app.js", "/assets/style.css"} {
		if b := get(t, d, p, nil).Body.String(); strings.Contains(b, "http://") && !strings.Contains(b, "http://www.w3.org/2000/svg") || strings.Contains(b, "https://") {
			t.Errorf("%s refers to another site", p)
		}
	}
	for _, tc := range []struct {
		method, target string
		want           int
	}{
		{"GET", "http://127.0.0.1/nope", 404},
		{"POST", "http://127.0.0.1/api/overview", 405},
		{"GET", "http://localhost:7800/api/overview", 200},
		{"GET", "http://[::1]:7800/api/overview", 200},
		{"GET", "http://evil.example:7800/api/overview", http.StatusMisdirectedRequest},
		{"GET", "http://127.0.0.1.evil.example/", http.StatusMisdirectedRequest},
	} {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.target, nil))
		if rec.Code != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.target, rec.Code, tc.want)
		}
	}
}

func TestOverviewAndHistoryFollowTheLedger(t *testing.T) {
	f := busy(t)
	d := newDashboard(t, LedgerSource(f.st, f.cosign(auditorIDs...)), Options{Auditor: "a2"})
	var ov Overview
	get(t, d, "/api/overview", &ov)
	if ov.Auditor != "a2" || ov.Origin != "test.nzc/dashboard" || ov.Entries != f.st.TreeSize() {
		t.Fatalf("overview header: %+v", ov)
	}
	accounts := f.st.Accounts()
	if len(ov.Accounts) != len(accounts) {
		t.Fatalf("%d accounts, want %d", len(ov.Accounts), len(accounts))
	}
	for i, a := range accounts {
		got := ov.Accounts[i]
		if got.Hospital != a.Hospital || float64(got.Epsilon) != a.Epsilon || got.EpsilonText != FormatEpsilon(a.Epsilon) ||
			got.CapText != FormatEpsilon(a.CapEpsilon) || got.Charges != a.Charges || got.Answers != a.Answers {
			t.Errorf("account %s: %+v, ledger %+v", a.Hospital, got, a)
		}
		if a.Epsilon <= 0 {
			t.Errorf("account %s spent nothing; the test should charge it", a.Hospital)
		}
	}

	entries, _ := f.st.Entries(0, f.st.TreeSize())
	points, err := ledger.SpendHistory(entries)
	if err != nil {
		t.Fatal(err)
	}
	var h History
	get(t, d, "/api/history", &h)
	if h.Entries != f.st.TreeSize() || len(h.Series) != 2 || h.Series[0].Hospital != "h1" || h.Series[1].Hospital != "h2" {
		t.Fatalf("history: %+v", h)
	}
	n := 0
	for _, s := range h.Series {
		for _, p := range s.Points {
			want := points[slices.IndexFunc(points, func(q ledger.SpendPoint) bool { return q.Index == p.Index && q.Hospital == s.Hospital })]
			if float64(p.Epsilon) != want.Epsilon || float64(p.Cap) != want.CapEpsilon || p.UnixMs != want.Timestamp/1e6 || p.Time != formatTime(want.Timestamp) {
				t.Errorf("%s at %d: %+v, want %+v", s.Hospital, p.Index, p, want)
			}
			n++
		}
		last := s.Points[len(s.Points)-1]
		a, _ := f.st.Account(s.Hospital)
		if float64(last.Epsilon) != a.Epsilon {
			t.Errorf("%s's last point %v, account %v", s.Hospital, last.Epsilon, a.Epsilon)
		}
	}
	if n != len(points) {
		t.Errorf("%d points, SpendHistory has %d", n, len(points))
	}
	// The time axis spans the earliest and the latest stamp.
	from, to := points[0].Timestamp, points[0].Timestamp
	for _, p := range points {
		from, to = min(from, p.Timestamp), max(to, p.Timestamp)
	}
	if h.From != from/1e6 || h.To != to/1e6 || h.FromTime != formatTime(from) || h.ToTime != formatTime(to) || !(h.To > h.From) {
		t.Errorf("history spans %d (%s) to %d (%s), want %d to %d", h.From, h.FromTime, h.To, h.ToTime, from/1e6, to/1e6)
	}
}

func TestActivityListsChargesAndRefusals(t *testing.T) {
	f := busy(t)
	d := newDashboard(t, LedgerSource(f.st, f.cosign(auditorIDs...)), Options{Recent: 3})
	var a Activity
	get(t, d, "/api/activity", &a)
	if len(a.Charges) != 3 || a.Charges[0].Batch != "batch-d" || a.Charges[2].Batch != "batch-b" {
		t.Fatalf("charges (newest 3 first): %+v", a.Charges)
	}
	c := a.Charges[0]
	if c.Student != "s1" || c.Mechanism != "gnmax" || c.Params != "classes=10 sigma=40 teachers=250" || c.Answers != 20 || len(c.Costs) != 2 {
		t.Fatalf("charge: %+v", c)
	}
	for _, cost := range c.Costs {
		acc, _ := f.st.Account(cost.Hospital)
		if cost.EpsilonText != FormatEpsilon(acc.Epsilon) || !(cost.Increase > 0) {
			t.Errorf("cost %+v; account ε %v", cost, acc.Epsilon)
		}
	}
	if len(a.Refusals) != 1 {
		t.Fatalf("refusals: %+v", a.Refusals)
	}
	r := a.Refusals[0]
	h1, _ := f.st.Account("h1")
	// The refusal is a fixed-size record: kind and signer, not the batch.
	if r.Index != uint64(f.st.TreeSize()-1) || r.Kind != "charge" || r.Signer != "agg" || r.Batch != "" ||
		r.Code != "cap-exceeded" || r.Subject != "h1" || !strings.Contains(r.Reason, FormatEpsilon(h1.Epsilon)) || !strings.Contains(r.Reason, "2.000") {
		t.Fatalf("refusal: %+v (h1 spent %v)", r, h1.Epsilon)
	}
}

func TestCheckpointAndVerification(t *testing.T) {
	for _, tc := range []struct {
		name     string
		signers  []string
		tamper   bool
		cpOK     bool
		verified bool
		failure  string // a failing check's name
	}{
		{"all cosign", auditorIDs, false, true, true, ""},
		{"a majority cosigns", []string{"a1", "a3"}, false, true, true, ""},
		{"one of three", []string{"a2"}, false, false, false, "export checkpoint"},
		{"a changed entry", auditorIDs, true, true, false, "replay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := busy(t)
			src := LedgerSource(f.st, f.cosign(tc.signers...))
			if tc.tamper {
				src = tampered{src, 5}
			}
			d := newDashboard(t, src, Options{})
			var cp CheckpointView
			get(t, d, "/api/checkpoint", &cp)
			want := slices.Clone(tc.signers)
			slices.Sort(want)
			if cp.OK != tc.cpOK || cp.Size != f.st.TreeSize() || cp.Root != f.st.RootHash().String() ||
				!slices.Equal(cp.Signers, want) || !slices.Equal(cp.Auditors, auditorIDs) || cp.Quorum != 2 ||
				len(cp.Missing) != 3-len(want) {
				t.Fatalf("checkpoint: %+v", cp)
			}
			if !tc.cpOK && !strings.Contains(cp.Error, "majority") {
				t.Errorf("checkpoint error %q does not say a majority must sign", cp.Error)
			}
			var v Verification
			get(t, d, "/api/verification", &v)
			if !v.Ran || v.OK != tc.verified || v.Entries != f.st.TreeSize() || len(v.Checks) == 0 {
				t.Fatalf("verification: %+v", v)
			}
			if tc.verified {
				if !strings.HasPrefix(v.Summary, "Verified: all") || !slices.Equal(v.Signers, want) || v.KeysPinned || v.Refused != 1 {
					t.Fatalf("verification: %+v", v)
				}
				for i, a := range f.st.Accounts() {
					if v.Accounts[i].EpsilonText != FormatEpsilon(a.Epsilon) {
						t.Errorf("replayed %s: %s, live %v", a.Hospital, v.Accounts[i].EpsilonText, a.Epsilon)
					}
				}
				return
			}
			failed := slices.IndexFunc(v.Checks, func(c ledger.Check) bool { return !c.OK && c.Name == tc.failure })
			if failed < 0 || !strings.Contains(v.Summary, "FAILED") {
				t.Fatalf("no failed %q check: %+v", tc.failure, v)
			}
			if tc.tamper && (v.Checks[failed].Entry == nil || *v.Checks[failed].Entry != 5) {
				t.Fatalf("the failure does not name entry 5: %+v", v.Checks[failed])
			}
		})
	}
}

// tampered changes one byte of one entry, as a corrupted replica would.
type tampered struct {
	Source
	index int64
}

func (s tampered) Entries(from, to int64) ([][]byte, error) {
	es, err := s.Source.Entries(from, to)
	if err == nil && s.index >= from && s.index < to {
		b := es[s.index-from]
		b[len(b)-9] ^= 1 // inside the entry's outcome
	}
	return es, err
}

func TestNoGenesis(t *testing.T) {
	st := ledger.New()
	d := newDashboard(t, LedgerSource(st, func(context.Context) ([]byte, error) {
		return nil, errors.New("the ledger has no genesis")
	}), Options{})
	var ov Overview
	get(t, d, "/api/overview", &ov)
	var cp CheckpointView
	get(t, d, "/api/checkpoint", &cp)
	var v Verification
	get(t, d, "/api/verification", &v)
	if ov.Entries != 0 || ov.Accounts == nil || len(ov.Accounts) != 0 || cp.OK || !strings.Contains(cp.Error, "no genesis") || v.Ran || v.OK {
		t.Fatalf("empty ledger: %+v %+v %+v", ov, cp, v)
	}
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// countingSource records how the dashboard reads the log.
type countingSource struct {
	Source
	mu      sync.Mutex
	reads   int        // cosigned checkpoints asked for: one per read of the log
	entries [][2]int64 // the ranges of entries read
}

func (s *countingSource) CosignedCheckpoint(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	s.reads++
	s.mu.Unlock()
	return s.Source.CosignedCheckpoint(ctx)
}

func (s *countingSource) Entries(from, to int64) ([][]byte, error) {
	s.mu.Lock()
	s.entries = append(s.entries, [2]int64{from, to})
	s.mu.Unlock()
	return s.Source.Entries(from, to)
}

func TestRefreshIsRateLimitedAndIncremental(t *testing.T) {
	f := busy(t)
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	src := &countingSource{Source: LedgerSource(f.st, f.cosign(auditorIDs...))}
	d := newDashboard(t, src, Options{Refresh: 5 * time.Second, VerifyEvery: 20 * time.Second, Now: clock.now})
	var ov Overview
	get(t, d, "/api/overview", &ov)
	if ov.GeneratedAt != "2026-01-02 03:04:05 UTC" {
		t.Fatalf("generated at %q", ov.GeneratedAt)
	}
	before := ov.Entries
	var first Verification
	get(t, d, "/api/verification", &first)
	if !first.OK || first.Entries != before {
		t.Fatalf("first verification: %+v", first)
	}

	if r := f.charge("later", []string{"h2"}, 10); r.Status != ledger.StatusAccepted {
		t.Fatal(r.Message)
	}
	clock.add(4 * time.Second)
	get(t, d, "/api/overview", &ov)
	if ov.Entries != before || src.reads != 1 {
		t.Fatalf("read again within the refresh interval: %d entries, %d reads", ov.Entries, src.reads)
	}
	clock.add(2 * time.Second)
	src.entries = nil
	get(t, d, "/api/overview", &ov)
	if ov.Entries != before+1 || src.reads != 2 {
		t.Fatalf("after the refresh interval: %d entries, %d reads", ov.Entries, src.reads)
	}
	if len(src.entries) == 0 || src.entries[0] != [2]int64{before, before + 1} {
		t.Fatalf("the replay read %v, want only the new entry [%d, %d)", src.entries, before, before+1)
	}
	var h History
	get(t, d, "/api/history", &h)
	if last := h.Series[1].Points[len(h.Series[1].Points)-1]; last.Index != uint64(before) {
		t.Fatalf("h2's chart ends at entry %d, want the new charge %d", last.Index, before)
	}
	// The verification runs again only after VerifyEvery.
	var v Verification
	get(t, d, "/api/verification", &v)
	if v.CheckedAt != first.CheckedAt || v.Entries != before {
		t.Fatalf("verification ran again within VerifyEvery: %+v", v)
	}
	clock.add(20 * time.Second)
	get(t, d, "/api/verification", &v)
	if !v.OK || v.Entries != before+1 || v.CheckedAt == first.CheckedAt {
		t.Fatalf("verification of the grown log: %+v", v)
	}
}

func TestThin(t *testing.T) {
	var ps []Point
	for i := range 1000 {
		cap := jsonnum.OrNull(2)
		if i >= 777 {
			cap = 3
		}
		ps = append(ps, Point{Index: uint64(i), Epsilon: jsonnum.OrNull(float64(i) / 1000), Cap: cap})
	}
	out, thinned := thin(ps, 100)
	if !thinned || len(out) > 102 || out[0].Index != 0 || out[len(out)-1].Index != 999 {
		t.Fatalf("thinned to %d points, first %d, last %d", len(out), out[0].Index, out[len(out)-1].Index)
	}
	if !slices.ContainsFunc(out, func(p Point) bool { return p.Index == 777 }) {
		t.Fatal("the cap change was thinned away")
	}
	if same, thinned := thin(ps[:50], 100); thinned || len(same) != 50 {
		t.Fatal("a short series was thinned")
	}
}

func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0.000"}, {1.23456, "1.235"}, {8, "8.000"}, {999999.5, "999999.500"},
		{2.5e7, "2.500e+07"}, {math.Inf(1), "∞"},
	} {
		if got := FormatEpsilon(tc.in); got != tc.want {
			t.Errorf("FormatEpsilon(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := FormatDelta(1e-5); got != "1e-05" {
		t.Errorf("FormatDelta(1e-5) = %q", got)
	}
}

// The dashboard names how raft's membership differs from the auditors the
// ledger registers: an auditor displaced from raft by another's join at
// its address, a voter the ledger does not know, or a membership it cannot
// read.
func TestMembershipDifferences(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []string
		err     error
		want    []string // a substring of each difference, in order
	}{
		{"agree", []string{"a3", "a1", "a2"}, nil, nil},
		{"a registered auditor displaced", []string{"a1", "a3"}, nil, []string{"registers auditor a2, but this auditor's raft membership lacks it"}},
		{"a voter the ledger does not know", []string{"a1", "a2", "a3", "rogue"}, nil, []string{"holds rogue, which the ledger does not register"}},
		{"both", []string{"a1", "rogue"}, nil, []string{"registers auditor a2", "registers auditor a3", "holds rogue"}},
		{"unreadable", nil, errors.New("no configuration"), []string{"could not be read: no configuration"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFed(t)
			members := func() ([]string, error) { return slices.Clone(tc.members), tc.err }
			d := newDashboard(t, LedgerSource(f.st, f.cosign(auditorIDs...)), Options{Members: members})
			var cp CheckpointView
			get(t, d, "/api/checkpoint", &cp)
			if len(cp.Membership) != len(tc.want) {
				t.Fatalf("membership differences %q, want %d", cp.Membership, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(cp.Membership[i], w) {
					t.Errorf("difference %d is %q, want it to say %q", i, cp.Membership[i], w)
				}
			}
			if tc.err == nil {
				want := slices.Sorted(slices.Values(tc.members))
				if !slices.Equal(cp.Members, want) {
					t.Errorf("members %q, want %q", cp.Members, want)
				}
			}
		})
	}
	t.Run("not compared without Members", func(t *testing.T) {
		f := newFed(t)
		d := newDashboard(t, LedgerSource(f.st, f.cosign(auditorIDs...)), Options{})
		var cp CheckpointView
		get(t, d, "/api/checkpoint", &cp)
		if len(cp.Membership) != 0 || len(cp.Members) != 0 {
			t.Fatalf("compared without a membership: %+v", cp)
		}
	})
}
