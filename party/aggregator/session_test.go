package aggregator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// svtFixture is a federation of n hospitals of 200 teachers each under
// nzc-svt with K = 3, quorum 2.
func svtFixture(t *testing.T, n int) (*fixture, Config) {
	t.Helper()
	return svtFixtureWith(t, n, rules{})
}

// svtFixtureWith is svtFixture under the given limits on each student.
func svtFixtureWith(t *testing.T, n int, r rules) (*fixture, Config) {
	t.Helper()
	f := newFixtureWith(t, n, 50, r)
	for _, h := range f.hospitals {
		h.teachers = 200
		f.cfg.Ensembles[h.id] = h.teachers
	}
	cfg := f.cfg
	cfg.Quorum = 2
	cfg.Mechanism = mechanism.Params{Mechanism: mechanism.NZCSVT, Threshold: 100, Scale: 1, MaxRefusals: 3}
	return f, cfg
}

// openings returns the signed OpenSession commands the ledger received and
// how many it accepted.
func (l *fakeLedger) openings(t *testing.T) (submitted [][]byte, accepted int) {
	t.Helper()
	l.mu.Lock()
	for _, cmd := range l.submitted {
		if c, err := ledger.DecodeCommand(cmd); err == nil {
			if _, ok := c.Body.(*ledger.OpenSession); ok {
				submitted = append(submitted, cmd)
			}
		}
	}
	l.mu.Unlock()
	s := l.m.State()
	entries, _ := s.Entries(0, s.TreeSize())
	for _, b := range entries {
		e, _ := ledger.DecodeEntry(b)
		if c, err := ledger.DecodeCommand(e.Command); err == nil && e.Status == ledger.StatusAccepted {
			if _, ok := c.Body.(*ledger.OpenSession); ok {
				accepted++
			}
		}
	}
	return submitted, accepted
}

// Hospitals coming and going open no new session: a session is over the
// hospitals admitted when it opens, all of which pay for it then, and a
// batch on which one of them did not vote counts its teachers as
// abstaining. A hospital absent from every other batch (as a flaky one
// is) costs the honest hospitals one session's ε for all the batches,
// where a session per hospital set would cost two. A hospital that joins
// after the session opened did not pay for it: its votes are left out
// until the next one. Only when fewer than the quorum of the voters are
// the session's hospitals is another opened.
func TestSessionsSurviveChurn(t *testing.T) {
	const batches, nq = 6, 10
	for _, tc := range []struct {
		name    string
		present func(batch int) []bool // which of the three hospitals are connected
		// sessions is how many sessions open; voters, by batch, the
		// hospitals each charge names.
		sessions int
		voters   func(batch int) []int
		leftOut  func(batch int) []int
	}{
		{
			name:     "the third hospital absent every other batch",
			present:  func(b int) []bool { return []bool{true, true, b%2 == 0} },
			sessions: 1,
			voters: func(b int) []int {
				if b%2 == 0 {
					return []int{0, 1, 2}
				}
				return []int{0, 1}
			},
		},
		{
			name:     "the third hospital absent every other batch, from the first",
			present:  func(b int) []bool { return []bool{true, true, b%2 == 1} },
			sessions: 1,
			voters:   func(int) []int { return []int{0, 1} },
			leftOut: func(b int) []int {
				if b%2 == 1 {
					return []int{2}
				}
				return nil
			},
		},
		{
			name: "the session's hospitals below the quorum",
			present: func(b int) []bool {
				if b < 3 {
					return []bool{true, true, false}
				}
				return []bool{false, true, true}
			},
			sessions: 2,
			voters: func(b int) []int {
				if b < 3 {
					return []int{0, 1}
				}
				return []int{1, 2}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, cfg := svtFixture(t, 3)
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			a.AddStudent("student-1", f.student.Recipient())
			remove := make([]func(), len(f.hospitals))
			var oneSession []float64 // each hospital's ε after the first batch
			sessions := map[string]bool{}
			for b := range batches {
				for i, h := range f.hospitals {
					switch on := tc.present(b)[i]; {
					case on && remove[i] == nil:
						if remove[i], err = a.AddHospital(h.id, h.teachers, h.classes, h); err != nil {
							t.Fatal(err)
						}
					case !on && remove[i] != nil:
						remove[i]()
						remove[i] = nil
					}
				}
				req, want := f.request(t, byte(b+1), nq)
				resp := label(t, a, req)
				l := f.open(t, resp)
				for q, got := range l.GetLabels() {
					if l.GetRefused()[q] || got != want[q] {
						t.Fatalf("batch %d query %d: %d (refused %v), want the exact argmax %d", b, q, got, l.GetRefused()[q], want[q])
					}
				}
				ch := f.led.charges(t)[batchHex(req)]
				var wantVoters []string
				for _, i := range tc.voters(b) {
					wantVoters = append(wantVoters, f.hospitals[i].id)
				}
				if ch == nil || ch.Session == "" || !slices.Equal(ch.Hospitals, wantVoters) {
					t.Fatalf("batch %d: charge %+v, want one in a session naming %v", b, ch, wantVoters)
				}
				sessions[ch.Session] = true
				var wantLeft []string
				if tc.leftOut != nil {
					for _, i := range tc.leftOut(b) {
						wantLeft = append(wantLeft, f.hospitals[i].id)
					}
				}
				if !slices.Equal(resp.GetLeftOut(), wantLeft) {
					t.Fatalf("batch %d: left out %v, want %v", b, resp.GetLeftOut(), wantLeft)
				}
				if b == 0 {
					for _, acc := range f.led.m.State().Accounts() {
						oneSession = append(oneSession, acc.Epsilon)
					}
				}
			}
			// A hospital votes only on batches that name it: none is
			// asked outside its session.
			for i, h := range f.hospitals {
				named := 0
				for _, ch := range f.led.charges(t) {
					if slices.Contains(ch.Hospitals, h.id) {
						named++
					}
				}
				if h.calls != named {
					t.Errorf("hospital %d was asked %d times, named in %d charges", i+1, h.calls, named)
				}
			}
			if _, n := f.led.openings(t); n != tc.sessions || len(sessions) != tc.sessions {
				t.Fatalf("%d sessions opened, %d charged in, for %d batches; want %d", n, len(sessions), batches, tc.sessions)
			}
			if tc.sessions != 1 {
				return
			}
			// The honest hospitals paid one session's ε for every batch;
			// the third paid it if it was there when the session opened,
			// else nothing.
			for i, acc := range f.led.m.State().Accounts() {
				paid := i < 2 || tc.present(0)[i]
				if acc.Epsilon != oneSession[i] || (acc.Epsilon != 0) != paid {
					t.Errorf("%s: ε %v after %d batches, %v after the first: want one session's (paid %v)", acc.Hospital, acc.Epsilon, batches, oneSession[i], paid)
				}
			}
		})
	}
}

// Opening a session waits for the ledger at most LedgerTimeout.
func TestSessionOpeningBoundedByLedgerTimeout(t *testing.T) {
	f, cfg := svtFixture(t, 2)
	cfg.Ledger, cfg.LedgerTimeout = hangingLedger{f.led}, 50*time.Millisecond
	a := f.start(t, cfg)
	req, _ := f.request(t, 1, 2)
	refusedInTime(t, a, req, 5*time.Second)
}

// A restarted aggregator resumes the sessions it kept in its outbox instead
// of opening, and paying for, new ones.
func TestSessionResumedAfterRestart(t *testing.T) {
	f, cfg := svtFixture(t, 2)
	a := f.start(t, cfg)
	req, _ := f.request(t, 1, 4)
	label(t, a, req)
	b := f.start(t, cfg) // the same outbox: a restart
	req, _ = f.request(t, 2, 4)
	label(t, b, req)
	if _, n := f.led.openings(t); n != 1 {
		t.Fatalf("%d sessions opened across a restart, want 1", n)
	}
	chs := f.led.charges(t)
	if len(chs) != 2 {
		t.Fatalf("%d charges, want 2", len(chs))
	}
	var sessions []string
	for _, ch := range chs {
		sessions = append(sessions, ch.Session)
	}
	if sessions[0] == "" || sessions[0] != sessions[1] {
		t.Fatalf("the batches ran in sessions %v, want one", sessions)
	}
}

// An opening whose outcome is unknown (the ledger applied it, the reply was
// lost) is proposed again byte for byte, by the same aggregator or, since
// it is kept in the outbox before it is proposed, by a restarted one: the
// session is paid for once.
func TestSessionOpeningRetriedIdentically(t *testing.T) {
	for _, restart := range []bool{false, true} {
		f, cfg := svtFixture(t, 2)
		a := f.start(t, cfg)
		req, _ := f.request(t, 1, 4)
		f.led.set(false, true)
		if _, err := a.Label(t.Context(), "student-1", req); !errors.Is(err, protocol.ErrLedgerUnavailable) {
			t.Fatalf("restart %v: got %v, want ledger-unavailable", restart, err)
		}
		f.led.set(false, false)
		if restart {
			a = f.start(t, cfg) // the same outbox
		}
		if _, err := a.Label(t.Context(), "student-1", req); err != nil {
			t.Fatalf("restart %v: %v", restart, err)
		}
		sub, n := f.led.openings(t)
		if n != 1 || len(sub) != 2 || !bytes.Equal(sub[0], sub[1]) {
			t.Fatalf("restart %v: %d sessions opened from %d proposals, want 1 from the same command twice", restart, n, len(sub))
		}
	}
}

// An exhausted session is over: its record leaves the outbox.
func TestExhaustedSessionLeavesTheOutbox(t *testing.T) {
	f, cfg := svtFixture(t, 2)
	a := f.start(t, cfg)
	for _, h := range f.hospitals {
		h.split = true // every query unstable: refused
	}
	req, _ := f.request(t, 1, 8)
	label(t, a, req)
	if recs, err := a.outbox.Sessions(); err != nil || len(recs) != 0 {
		t.Fatalf("%d session records after the session was exhausted (%v), want none", len(recs), err)
	}
}

// A batch that finds its session used up by a batch still in flight opens
// the next session only once that batch's charge is settled: the ledger
// refuses a charge naming a session that has been replaced, so opening the
// replacement first would throw away the first batch's answers after its
// noise was drawn. Batch 1 uses the session up and stops before its charge
// is signed; batch 2, arriving then, must not open the next session until
// batch 1's charge is in the ledger.
func TestSessionReplacedOnlyAfterItsChargesSettle(t *testing.T) {
	f, cfg := svtFixture(t, 2)
	for _, h := range f.hospitals {
		h.split = true // every query refused: batch 1 uses up K = 3
	}
	var (
		first     atomic.Bool
		answered  = make(chan struct{})
		release   = make(chan struct{})
		releaseMu sync.Once
	)
	cfg.Pause = func(_ context.Context, point string) {
		switch point {
		case PauseSessionAnswered:
			if first.CompareAndSwap(false, true) {
				close(answered)
				<-release
			}
		case PauseSessionReplacing:
			releaseMu.Do(func() { close(release) })
		}
	}
	a := f.start(t, cfg)
	req1, _ := f.request(t, 1, 8)
	req2, _ := f.request(t, 2, 4)
	errs := make(chan error, 2)
	go func() {
		_, err := a.Label(t.Context(), "student-1", req1)
		errs <- err
	}()
	<-answered
	go func() {
		_, err := a.Label(t.Context(), "student-1", req2)
		errs <- err
	}()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a batch was refused: %v", err)
		}
	}
	chs := f.led.charges(t)
	if len(chs) != 2 {
		t.Fatalf("%d charges accepted, want both batches'", len(chs))
	}
	if _, n := f.led.openings(t); n != 2 {
		t.Fatalf("%d sessions opened, want 2 (the second after the first was used up)", n)
	}
}

// A session opens over the hospitals that can pay for it: one whose cap is
// below a session's ε is left out of it (and named), and the others open it
// and answer, where the ledger's refusal of the whole opening stopped
// every hospital's batches. With too few that can pay, the batch is
// refused, charging nothing.
func TestSessionOpensOverTheHospitalsThatCanPay(t *testing.T) {
	f, cfg := svtFixture(t, 3)
	a := f.start(t, cfg)
	lowerCap := func(i int) {
		t.Helper()
		h := f.m.ByRole(crypto.RoleHospital)[i]
		at := time.Unix(1_800_000_000, 0).Add(time.Minute).UnixNano() // after the account opened
		cmd, err := ledger.Sign(&ledger.ChangeCap{Hospital: h.ID, Version: 1, CapEpsilon: 1e-3, CapDelta: 1e-5, Timestamp: at}, h.ID, cryptotest.SigningKey(t, f.m, h))
		if err != nil {
			t.Fatal(err)
		}
		if res, err := f.led.Submit(t.Context(), cmd); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
			t.Fatalf("lower the cap of %s: %v %v", h.ID, res, err)
		}
	}
	lowerCap(2)
	req, _ := f.request(t, 1, 4)
	resp, err := a.Label(t.Context(), "student-1", req)
	if err != nil {
		t.Fatalf("one hospital's lowered cap stopped the session: %v", err)
	}
	if lo := resp.GetLeftOut(); !slices.Equal(lo, []string{"hospital-3"}) {
		t.Fatalf("left out %v, want hospital-3", lo)
	}
	f.wantChargedTo(t, req, "hospital-1", "hospital-2")
	if c := f.hospitals[2].calls; c != 0 {
		t.Fatalf("hospital-3 was asked %d times to vote in a session it is not in", c)
	}
	if _, n := f.led.openings(t); n != 1 {
		t.Fatalf("%d sessions opened, want 1", n)
	}
	if acc := f.led.m.State().Accounts()[2]; acc.Epsilon != 0 {
		t.Fatalf("%s paid ε %v for a session it is not in", acc.Hospital, acc.Epsilon)
	}

	// Two of three cannot pay: no new session (the student's is made to
	// not fit by a new student).
	lowerCap(1)
	a.AddStudent("student-2", f.student.Recipient())
	charges := len(f.led.charges(t))
	req2, _ := f.request(t, 2, 4)
	_, err = a.Label(t.Context(), "student-2", req2)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeBudgetExhausted || !strings.Contains(pe.Message, "hospital-2") || !strings.Contains(pe.Message, "hospital-3") {
		t.Fatalf("got %v, want a budget refusal naming the two hospitals that cannot pay", err)
	}
	if _, n := f.led.openings(t); n != 1 || len(f.led.charges(t)) != charges {
		t.Fatalf("the refused batch opened a session (%d in all) or was charged", n)
	}
}

// An outbox an earlier run filled with one session per hospital set
// resumes one session per student: the one over more hospitals, the
// other's record dropped.
func TestRestartKeepsOneSessionPerStudent(t *testing.T) {
	f, cfg := svtFixture(t, 3)
	a := f.start(t, cfg)
	req, _ := f.request(t, 1, 4)
	label(t, a, req)
	recs, err := a.outbox.Sessions()
	if err != nil || len(recs) != 1 {
		t.Fatalf("%d session records (%v), want 1", len(recs), err)
	}
	// The record of a session over two of the hospitals, as an earlier
	// run kept beside it.
	two := *recs[0]
	c, err := ledger.DecodeCommand(two.Open)
	if err != nil {
		t.Fatal(err)
	}
	o := *c.Body.(*ledger.OpenSession)
	o.SessionID, o.Hospitals = "svt-of-two", o.Hospitals[:2]
	if two.Open, err = ledger.Sign(&o, cfg.ID, cfg.SigningKey); err != nil {
		t.Fatal(err)
	}
	two.SessionID, two.Hospitals, two.Ensembles, two.Teachers = o.SessionID, o.Hospitals, nil, 400
	if err := a.outbox.PutSession(&two); err != nil {
		t.Fatal(err)
	}
	b := f.start(t, cfg) // the same outbox: a restart
	recs, err = b.outbox.Sessions()
	if err != nil || len(recs) != 1 || recs[0].SessionID == two.SessionID {
		t.Fatalf("after the restart: %d session records (%v), want only the session over three hospitals", len(recs), err)
	}
	req, _ = f.request(t, 2, 4)
	label(t, b, req)
	if ch := f.led.charges(t)[batchHex(req)]; ch.Session != recs[0].SessionID {
		t.Fatalf("the batch ran in %s, want the resumed %s", ch.Session, recs[0].SessionID)
	}
}

// alternatingHospital misses the deadline of every other batch it is
// asked (it answers only when the batch's context ends), and answers the
// others in time: a flaky hospital.
type alternatingHospital struct {
	*fakeHospital
	asked atomic.Int64
}

func (h *alternatingHospital) Query(ctx context.Context, q *nzcpb.QueryBatch) (*nzcpb.VoteBatch, error) {
	if h.asked.Add(1)%2 == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.fakeHospital.Query(ctx, q)
}

// The same with real deadlines: a hospital that misses every other batch
// it is asked, left out for its misses and probed again by timing alone,
// costs the honest hospitals one session's ε over the whole run; the
// batches it misses run in the session with its teachers abstaining.
func TestFlakyHospitalPaysOneSession(t *testing.T) {
	f, cfg := svtFixture(t, 3)
	flaky := &alternatingHospital{fakeHospital: f.hospitals[2]}
	synctest.Test(t, func(t *testing.T) {
		cfg := cfg
		cfg.BatchDeadline, cfg.MissBackoff, cfg.MissBackoffMax = 2*time.Second, time.Second, time.Second
		cfg.Now = time.Now
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range []Hospital{f.hospitals[0], f.hospitals[1], flaky} {
			if _, err := a.AddHospital(f.hospitals[i].id, f.hospitals[i].teachers, classes, h); err != nil {
				t.Fatal(err)
			}
		}
		a.AddStudent("student-1", f.student.Recipient())
		var first []float64
		sets := map[string]bool{}
		for id := byte(1); id <= 12; id++ {
			req, want := f.request(t, id, 10)
			resp := label(t, a, req)
			l := f.open(t, resp)
			for q, got := range l.GetLabels() {
				if got != want[q] {
					t.Fatalf("batch %d query %d: %d, want %d", id, q, got, want[q])
				}
			}
			sets[strings.Join(f.led.charges(t)[batchHex(req)].Hospitals, ",")] = true
			if id == 1 {
				for _, acc := range f.led.m.State().Accounts() {
					first = append(first, acc.Epsilon)
				}
			}
			time.Sleep(3 * time.Second) // past the miss's backing-off period: probed again
		}
		if len(sets) < 2 || flaky.asked.Load() < 6 {
			t.Fatalf("charged to the hospital sets %v, the flaky hospital asked %d times: the run did not churn", sets, flaky.asked.Load())
		}
		if _, n := f.led.openings(t); n != 1 {
			t.Fatalf("%d sessions opened for the hospital sets %v, want 1", n, sets)
		}
		for i, acc := range f.led.m.State().Accounts()[:2] {
			if acc.Epsilon != first[i] || acc.Epsilon == 0 {
				t.Errorf("%s: ε %v after the run, %v after the first batch: want one session's", acc.Hospital, acc.Epsilon, first[i])
			}
		}
	})
}

// events records, in order, what the aggregator does that a session's
// opening must precede: a hospital asked for votes ("vote"), randomness
// drawn ("rand N", N bytes), and an opening the ledger committed ("open").
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(ev string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, ev)
}

// before returns the events before the first "open" (all of them when
// none), and whether there was one.
func (e *events) before() ([]string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := slices.Index(e.log, "open")
	if i < 0 {
		return slices.Clone(e.log), false
	}
	return slices.Clone(e.log[:i]), true
}

type eventLedger struct {
	Ledger
	ev *events
}

func (l eventLedger) Submit(ctx context.Context, cmd []byte) (*nzcpb.LedgerResult, error) {
	res, err := l.Ledger.Submit(ctx, cmd)
	if c, derr := ledger.DecodeCommand(cmd); derr == nil && err == nil && res.GetCode() == nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
		if _, ok := c.Body.(*ledger.OpenSession); ok {
			l.ev.add("open")
		}
	}
	return res, err
}

type eventHospital struct {
	*fakeHospital
	ev *events
}

func (h eventHospital) Query(ctx context.Context, q *nzcpb.QueryBatch) (*nzcpb.VoteBatch, error) {
	h.ev.add("vote")
	return h.fakeHospital.Query(ctx, q)
}

type eventRand struct {
	r  io.Reader
	ev *events
}

func (r eventRand) Read(p []byte) (int, error) {
	r.ev.add(fmt.Sprintf("rand %d", len(p)))
	return r.r.Read(p)
}

// lowerCap lowers hospital i's cap below a session's ε.
func (f *fixture) lowerCap(t *testing.T, i int) {
	t.Helper()
	h := f.m.ByRole(crypto.RoleHospital)[i]
	at := time.Unix(1_800_000_000, 0).Add(time.Minute).UnixNano() // after the account opened
	cmd, err := ledger.Sign(&ledger.ChangeCap{Hospital: h.ID, Version: 1, CapEpsilon: 1e-3, CapDelta: 1e-5, Timestamp: at}, h.ID, cryptotest.SigningKey(t, f.m, h))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := f.led.Submit(t.Context(), cmd); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
		t.Fatalf("lower the cap of %s: %v %v", h.ID, res, err)
	}
}

// Budget before votes for a mechanism that answers in sessions: the
// session's opening, its whole cost paid by every hospital of it, is
// committed in the ledger before any hospital is asked for the first
// batch's votes and before any noise is drawn (the only randomness drawn
// before it is each proposed opening's 16-byte session id). Against a
// budget read from a lagging auditor, a hospital whose cap the ledger finds
// too low is left out of the opening without being asked; with fewer than
// the quorum able to pay, the batch is refused having asked no one and
// drawn nothing.
func TestSessionOpenedBeforeVotes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lowered []int // hospitals whose caps drop below a session's ε after the budget read
		// ids is how many openings are proposed; refused, whether the
		// batch is refused; asked, which hospitals are asked.
		ids     int
		refused bool
		asked   []bool
	}{
		{name: "every hospital can pay", ids: 1, asked: []bool{true, true, true}},
		{name: "the ledger finds one cannot pay", lowered: []int{2}, ids: 2, asked: []bool{true, true, false}},
		{name: "the ledger finds two cannot pay", lowered: []int{1, 2}, ids: 2, refused: true, asked: []bool{false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, cfg := svtFixture(t, 3)
			ev := &events{}
			stale := intake.Budgets(f.led.m.State(), &nzcpb.BudgetRequest{})
			for _, i := range tc.lowered {
				f.lowerCap(t, i)
			}
			cfg.Ledger = eventLedger{Ledger: laggingLedger{fakeLedger: f.led, stale: stale}, ev: ev}
			cfg.Rand = eventRand{r: cfg.Rand, ev: ev}
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range f.hospitals {
				if _, err := a.AddHospital(h.id, h.teachers, h.classes, eventHospital{fakeHospital: h, ev: ev}); err != nil {
					t.Fatal(err)
				}
			}
			a.AddStudent("student-1", f.student.Recipient())
			req, _ := f.request(t, 1, 10)
			_, err = a.Label(t.Context(), "student-1", req)
			var pe *protocol.Error
			switch {
			case tc.refused && (!errors.As(err, &pe) || pe.Code != protocol.CodeBudgetExhausted || !strings.Contains(pe.Message, "nothing was asked of the hospitals or drawn")):
				t.Fatalf("got %v, want a budget refusal that asked and drew nothing", err)
			case !tc.refused && err != nil:
				t.Fatalf("the batch was refused: %v", err)
			}
			pre, opened := ev.before()
			want := slices.Repeat([]string{"rand 16"}, tc.ids)
			if !slices.Equal(pre, want) || opened == tc.refused {
				t.Fatalf("before the opening's commit (committed: %v): %q, want only the opening ids' draws %q", opened, pre, want)
			}
			for i, h := range f.hospitals {
				if asked := h.calls > 0; asked != tc.asked[i] {
					t.Errorf("%s asked %d times, want asked: %v", h.id, h.calls, tc.asked[i])
				}
			}
			if _, n := f.led.openings(t); n != btoi(!tc.refused) {
				t.Fatalf("%d sessions opened", n)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// gatedHospital holds its answer to the batch gated until gate closes,
// telling asked when it is asked for it.
type gatedHospital struct {
	*fakeHospital
	gated []byte
	asked chan<- struct{}
	gate  <-chan struct{}
}

func (h gatedHospital) Query(ctx context.Context, q *nzcpb.QueryBatch) (*nzcpb.VoteBatch, error) {
	if bytes.Equal(q.GetBatchId(), h.gated) {
		h.asked <- struct{}{}
		select {
		case <-h.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.fakeHospital.Query(ctx, q)
}

// No session opens once votes are in hand: a batch admitted into the
// student's session, which another batch uses up while this one's votes
// are collected, is refused (to be retried) rather than opening the next
// session after its votes; the retry opens it before asking anyone.
func TestSessionUsedUpDuringVotesOpensNoneAfterThem(t *testing.T) {
	f, cfg := svtFixture(t, 3)
	for _, h := range f.hospitals {
		h.split = true // every query refused: K = 3 refusals use a session up
	}
	cfg.BatchDeadline = time.Hour // the gated batch waits on the other, not on a clock
	cfg.SVTMinAnswers = -1        // no burn: the split votes answer nothing
	first, _ := f.request(t, 1, 1)
	gated, _ := f.request(t, 2, 1)
	usesUp, _ := f.request(t, 3, 8)
	asked := make(chan struct{}, len(f.hospitals))
	gate := make(chan struct{})
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range f.hospitals {
		if _, err := a.AddHospital(h.id, h.teachers, h.classes, gatedHospital{fakeHospital: h, gated: gated.GetBatchId(), asked: asked, gate: gate}); err != nil {
			t.Fatal(err)
		}
	}
	a.AddStudent("student-1", f.student.Recipient())
	label(t, a, first) // opens the session: one refusal of three
	errs := make(chan error, 1)
	go func() {
		_, err := a.Label(t.Context(), "student-1", gated)
		errs <- err
	}()
	for range f.hospitals {
		<-asked
	}
	label(t, a, usesUp) // uses the session up while the gated batch's votes are out
	if _, n := f.led.openings(t); n != 1 {
		t.Fatalf("%d sessions opened before the gated batch's votes came in, want 1", n)
	}
	close(gate)
	var pe *protocol.Error
	if err := <-errs; !errors.As(err, &pe) || pe.Code != protocol.CodeUnavailable || pe.RetryAfter == 0 {
		t.Fatalf("the batch whose session was used up while its votes were collected: %v, want a refusal to retry", err)
	}
	if _, n := f.led.openings(t); n != 1 {
		t.Fatalf("%d sessions opened, want 1: none after a batch's votes", n)
	}
	if _, ok := f.led.charges(t)[batchHex(gated)]; ok {
		t.Fatal("the refused batch was charged")
	}
	label(t, a, gated) // the retry opens the next session before asking anyone
	if _, n := f.led.openings(t); n != 2 {
		t.Fatalf("%d sessions opened after the retry, want 2", n)
	}
}

// A session batch holds the student's quota too: of two batches at once
// under nzc-svt, each within the student's answer quota alone and not
// together, against a lagging budget read that shows neither, the second
// is refused at its reservation before any hospital is asked for its
// votes (before, both were asked and the second's charge was refused for
// the quota after its votes were collected).
func TestConcurrentSessionBatchesHoldTheStudentQuota(t *testing.T) {
	f, cfg := svtFixtureWith(t, 2, rules{quota: 10})
	cfg.Ledger = laggingLedger{fakeLedger: f.led, stale: intake.Budgets(f.led.m.State(), &nzcpb.BudgetRequest{StudentId: "student-1"})}
	a := f.start(t, cfg)
	const nq = 6 // of a quota of 10 answers: one batch fits, two do not
	refused := labelTwoAtOnce(t, f, a, 40, nq, "two session batches of 6 queries at once under a quota of 10")
	if refused.Code != protocol.CodeBudgetExhausted || !strings.Contains(refused.Message, "reservation") || !strings.Contains(refused.Message, "nothing was asked of the hospitals or drawn") {
		t.Fatalf("the refusal: %v, want the ledger's refusal of its reservation", refused)
	}
	for _, h := range f.hospitals {
		if h.calls != 1 {
			t.Errorf("hospital %s was asked %d times, want once: only for the batch the quota admits", h.id, h.calls)
		}
	}
	if got := len(f.led.charges(t)); got != 1 {
		t.Fatalf("%d batches charged, want 1", got)
	}
	if q, _ := f.led.m.State().Student("student-1"); q.Answers > 10 {
		t.Fatalf("student-1 has %d answers, over its quota of 10", q.Answers)
	}
}
