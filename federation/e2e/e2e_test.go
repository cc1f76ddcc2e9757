package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/federation/launch"
	"github.com/nzcfed/nzc/federation/proctest"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/selection"
	"github.com/nzcfed/nzc/party/aggregator"
	"github.com/nzcfed/nzc/party/auditor"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
	"github.com/nzcfed/nzc/party/student"
	"github.com/nzcfed/nzc/party/teacher"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

const (
	classes  = 4
	dim      = 3
	teachers = 10   // per hospital
	capEps   = 20.0 // the crash subtest ends near 12 of it, converted as the gate converts
)

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(newTWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// tWriter logs to t until the test ends; a party still stopping after that
// logs nowhere (the testing package panics on a Log after a test completed).
type tWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func newTWriter(t *testing.T) *tWriter {
	w := &tWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p))
	}
	return len(p), nil
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	proctest.WaitFor(t, within, what, cond)
}

type federation struct {
	t        *testing.T
	fed      *launch.Federation
	m        *crypto.Manifest
	ca       *x509.Certificate
	auditors []*auditor.Auditor
	machines []*auditor.Ledger
	nodes    []*raftnode.Node
	intakes  []string
	// log, when set, replaces the test's warning logger for every party.
	log *slog.Logger
	// raftTimeout, when set, replaces the fast raft heartbeat and election
	// timeouts of the tests (200ms).
	raftTimeout time.Duration
}

// newFederation provisions a federation of 3 hospitals, 3 auditors and
// the given number of students in a temporary directory; log, when not
// nil, is every party's logger.
func newFederation(t *testing.T, students int, log *slog.Logger) *federation {
	t.Helper()
	fed, err := launch.Provision(t.TempDir(), provision.Spec{Hospitals: 3, Auditors: 3, Students: students})
	if err != nil {
		t.Fatal(err)
	}
	return &federation{t: t, fed: fed, m: fed.M, ca: fed.CA, log: log}
}

func (f *federation) logger() *slog.Logger {
	if f.log != nil {
		return f.log
	}
	return logger(f.t)
}

func (f *federation) party(role crypto.Role, id string) crypto.PartyFiles {
	p, ok := f.m.Party(role, id)
	if !ok {
		f.t.Fatalf("no %s %s", role, id)
	}
	return p
}

func (f *federation) net(p crypto.PartyFiles) quicnet.Config {
	cred := cryptotest.Credential(f.t, f.m, p)
	return quicnet.Config{CA: f.ca, Credential: cred, Logger: f.logger().With("party", p.ID)}
}

func (f *federation) identity(p crypto.PartyFiles) *crypto.Identity {
	return cryptotest.Identity(f.t, f.m, p)
}

func (f *federation) signingKey(p crypto.PartyFiles) ed25519.PrivateKey {
	return cryptotest.SigningKey(f.t, f.m, p)
}

// group returns a group of in-process parties that run until the test
// ends; their errors fail it.
func group(t *testing.T) *launch.Group {
	g := launch.NewGroup(context.Background())
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// load returns the key material of party p, with the federation's logger.
func (f *federation) load(p crypto.PartyFiles) *launch.Party {
	f.t.Helper()
	lp, err := f.fed.Party(p.Role, p.ID, f.logger())
	if err != nil {
		f.t.Fatal(err)
	}
	return lp
}

// ledgerClient is the aggregator's client of the auditors' intakes, closed
// when the test ends.
func (f *federation) ledgerClient() *intake.Client {
	f.t.Helper()
	lc, err := intake.NewClient(f.net(f.party(crypto.RoleAggregator, "aggregator")), f.intakes)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { lc.Close() })
	return lc
}

// startAggregator starts the aggregator in g on addr ("127.0.0.1:0" for a
// free port) with cfg, charging led.
func (f *federation) startAggregator(g *launch.Group, addr string, led aggregator.Ledger, cfg aggregator.Config) *launch.Aggregator {
	f.t.Helper()
	cfg.Ledger, cfg.AuditorKeys = led, f.auditorKeys()
	a, err := launch.StartAggregator(g, f.load(f.party(crypto.RoleAggregator, "aggregator")), addr, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// startHospitals starts every hospital in g, the i-th voting with
// voter(i), waits until the aggregator has them all and their budget
// accounts are open, and returns their age recipients.
func (f *federation) startHospitals(g *launch.Group, agg *launch.Aggregator, capEps float64, voter func(i int) teacher.Voter) []*crypto.Recipient {
	f.t.Helper()
	if err := f.fed.StartHospitals(f.t.Context(), g, agg, f.machines[0], 20*time.Second, f.logger(), teacher.Config{CapEpsilon: capEps, CapDelta: 1e-5},
		func(i int, c *teacher.Config) { c.Voter = voter(i) }); err != nil {
		f.t.Fatal(err)
	}
	rs, err := f.fed.HospitalRecipients()
	if err != nil {
		f.t.Fatal(err)
	}
	return rs
}

// startAuditors runs three auditors (raft over mutual TLS, their QUIC
// intakes) and applies the federation's genesis through a follower.
func startAuditors(t *testing.T, f *federation) {
	timeout := 200 * time.Millisecond
	if f.raftTimeout > 0 {
		timeout = f.raftTimeout
	}
	var err error
	f.auditors, err = f.fed.StartAuditors(t.Context(), group(t), launch.AuditorOptions{
		DataDir: func(string) string { return t.TempDir() }, Origin: "nzc.e2e/ledger", Log: f.logger(),
		Raft: raftnode.Tuning{HeartbeatTimeout: timeout, ElectionTimeout: timeout, ApplyTimeout: 5 * time.Second},
		// The soak and ONNX runs give hospitals caps up to 1e6 so that no
		// batch is refused for budget; the bounds are tested in ledger.
		EpsilonBound: 1e6,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range f.auditors {
		f.machines, f.nodes = append(f.machines, a.Ledger()), append(f.nodes, a.Node())
	}
	f.intakes = launch.Intakes(f.auditors)
}

// checkCharges checks that every batch of res was charged once to the
// student and exactly these hospitals, for its queries, with the hash of the
// labels the student received.
func (f *federation) checkCharges(res *student.Result, studentID string, hospitals ...string) {
	f.t.Helper()
	charges := f.charges()
	for _, b := range res.Batches {
		ch := charges[b.BatchID]
		if ch == nil {
			f.t.Fatalf("batch %d was delivered without a charge in the ledger", b.Index)
		}
		if hex.EncodeToString(ch.AnswersHash[:]) != b.AnswersHash {
			f.t.Fatalf("batch %d: the labels' hash differs from the answers hash the ledger committed", b.Index)
		}
		if !slices.Equal(ch.Hospitals, hospitals) || ch.Student != studentID || ch.Queries != uint64(len(b.Labels)) {
			f.t.Fatalf("batch %d: charge names %v and %s for %d queries, want %v and %s for %d", b.Index, ch.Hospitals, ch.Student, ch.Queries, hospitals, studentID, len(b.Labels))
		}
	}
}

// charges returns the accepted charges of the ledger as every auditor
// holds it, once all three agree.
func (f *federation) charges() map[string]*ledger.Charge {
	f.t.Helper()
	var size int64
	waitFor(f.t, 10*time.Second, "the auditors to converge", func() bool {
		size = f.machines[0].State().TreeSize()
		return f.machines[1].State().TreeSize() == size && f.machines[2].State().TreeSize() == size &&
			f.machines[0].State().RootHash() == f.machines[1].State().RootHash() && f.machines[0].State().RootHash() == f.machines[2].State().RootHash()
	})
	entries, err := f.machines[2].State().Entries(0, size)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := ledger.Replay(entries); err != nil {
		f.t.Fatalf("the replicated ledger does not replay: %v", err)
	}
	_, charges, err := launch.Charges(entries)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]*ledger.Charge{}
	for id, cs := range charges {
		if len(cs) != 1 {
			f.t.Fatalf("batch %s charged %d times", id, len(cs))
		}
		out[id] = cs[0].Charge
	}
	return out
}

// voter is a hospital's ensemble on the synthetic data: every teacher
// votes class round(x[0]) mod classes.
type voter struct{}

func (voter) Teachers() int { return teachers }
func (voter) Classes() int  { return classes }
func (voter) Dim() int      { return dim }
func (voter) Votes(_ context.Context, x []float32) ([][]int, error) {
	out := make([][]int, len(x)/dim)
	for q := range out {
		out[q] = make([]int, classes)
		out[q][int(x[q*dim])%classes] = teachers
	}
	return out, nil
}

func dataset(n, offset int) *data.Dataset {
	d := &data.Dataset{X: make([]float32, n*dim), Y: make([]int, n), Shape: data.Shape{Height: 1, Width: dim, Channels: 1}, Classes: classes}
	for i := range n {
		d.Y[i] = (i + offset) % classes
		d.X[i*dim] = float32(d.Y[i])
		d.X[i*dim+1] = float32(i + offset) // makes every row, hence every data set, distinct
	}
	return d
}

// crashingLedger passes charges to the ledger; armed, it "crashes" the
// aggregator right after the ledger committed a charge, before the answer
// is delivered.
type crashingLedger struct {
	aggregator.Ledger
	mu      sync.Mutex
	armed   bool
	crash   func()
	crashed chan string
}

func (l *crashingLedger) Submit(ctx context.Context, cmd []byte) (*nzcpb.LedgerResult, error) {
	res, err := l.Ledger.Submit(ctx, cmd)
	l.mu.Lock()
	defer l.mu.Unlock()
	c, _ := ledger.DecodeCommand(cmd)
	if ch, ok := c.Body.(*ledger.Charge); ok && l.armed && err == nil && res.GetCode() == nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
		l.armed = false
		l.crash()
		l.crashed <- ch.BatchID
		return nil, errors.New("the aggregator stopped before delivering")
	}
	return res, err
}

func TestFederation(t *testing.T) {
	f := newFederation(t, 1, nil)
	m := f.m
	startAuditors(t, f)

	// The aggregator, on a port it keeps across its restart.
	lc := f.ledgerClient()
	crashing := &crashingLedger{Ledger: lc, crashed: make(chan string, 1)}
	aggCfg := aggregator.Config{
		OutboxDir: t.TempDir(), Mechanism: mechanism.Params{Mechanism: mechanism.ConfidentGNMax, Threshold: 18, Sigma1: 10, Sigma2: 5},
		Quorum: 3, Hospitals: 3, BatchDeadline: 10 * time.Second, Classes: classes, Ensemble: teachers,
	}
	g := group(t)
	agg := f.startAggregator(g, "127.0.0.1:0", crashing, aggCfg)
	aggAddr := agg.Addr
	crashing.crash = agg.Stop

	backoff := quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond}
	hospitals := f.startHospitals(g, agg, capEps, func(int) teacher.Voter { return voter{} })

	stP := f.party(crypto.RoleStudent, "student-1")
	// newStudent starts student-1 afresh (its own state directory), asking
	// batches of 4 up to 50 times each; tune sets what a case tries.
	newStudent := func(t *testing.T, tune func(*student.Config)) *student.Client {
		t.Helper()
		cfg := student.Config{ID: stP.ID, Aggregator: aggAddr, Net: f.net(stP), Identity: f.identity(stP), AuditorKeys: f.auditorKeys(),
			Hospitals: hospitals, BatchSize: 4, StateDir: t.TempDir(), Backoff: backoff, Attempts: 50, Logger: logger(t).With("party", "student")}
		tune(&cfg)
		st, err := student.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := newStudent(t, func(c *student.Config) { c.BatchSize = 8 })

	checkAgainstLedger := func(res *student.Result) {
		t.Helper()
		f.checkCharges(res, "student-1", "hospital-1", "hospital-2", "hospital-3")
	}

	// labelAll labels d through s in the given number of batches, checks
	// each label against the teachers' unanimous vote and each batch
	// against the ledger, and checks that a second run resumes every batch
	// without asking again.
	labelAll := func(t *testing.T, s *student.Client, d *data.Dataset, batches int) *student.Result {
		t.Helper()
		res, err := s.Label(t.Context(), d, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Batches) != batches || res.Answered+res.Refused != len(d.Y) {
			t.Fatalf("%d batches, %d answered, %d refused", len(res.Batches), res.Answered, res.Refused)
		}
		for i, l := range res.Labels {
			if l >= 0 && l != d.Y[i] {
				t.Errorf("query %d: label %d, every teacher voted %d", i, l, d.Y[i])
			}
		}
		checkAgainstLedger(res)
		again, err := s.Label(t.Context(), d, nil)
		if err != nil || again.Resumed != batches {
			t.Fatalf("a second run resumed %d batches (%v), want all %d without asking", again.Resumed, err, batches)
		}
		return res
	}

	t.Run("labels are released after their charge", func(t *testing.T) {
		labelAll(t, st, dataset(24, 0), 3)
	})

	t.Run("a student with only the administrator's key seals to the founding hospitals", func(t *testing.T) {
		// No hospital is listed: each founding hospital sends the signed
		// genesis as its registration, the student verifies it against the
		// administrator's key, and every hospital opens and votes on every
		// batch (checkAgainstLedger: each is charged to all three).
		adminPub, err := crypto.LoadPublicKey(m.Path(m.AdminVerifyingKey))
		if err != nil {
			t.Fatal(err)
		}
		only := newStudent(t, func(c *student.Config) { c.Hospitals, c.AdminKey = nil, adminPub })
		labelAll(t, only, dataset(8, 400), 2)
	})

	t.Run("batches asked several at a time are recorded in order", func(t *testing.T) {
		win := newStudent(t, func(c *student.Config) { c.Window = 2 })
		res := labelAll(t, win, dataset(14, 200), 4) // small: the hospitals' caps must last the whole test
		for i, b := range res.Batches {
			if b.Index != i || b.From != 4*i {
				t.Fatalf("batch %d recorded as index %d from %d", i, b.Index, b.From)
			}
		}
	})

	t.Run("a bootstrapped run asks the rest in the ranked order, once", func(t *testing.T) {
		var ranked int
		boot := newStudent(t, func(c *student.Config) {
			c.Window, c.Bootstrap = 2, 5
			c.Rank = func(_ context.Context, d *data.Dataset, labels []int, asked []bool) ([]int, error) {
				ranked++
				// Batches 0 and 1 answer the first 5; batch 2 was asked
				// meanwhile (window 2) and counts as asked too.
				for q := range d.Len() {
					if asked[q] != (q < 12) || (q >= 12 && labels[q] != -1) {
						t.Errorf("query %d: asked %v, label %d when the rest is ranked", q, asked[q], labels[q])
					}
				}
				return []int{15, 14, 13}, nil // query 12 is never asked
			}
		})
		d := dataset(16, 300)
		res, err := boot.Label(t.Context(), d, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 15, 14, 13}
		if ranked != 1 || !slices.Equal(res.Order, want) || len(res.Batches) != 4 || res.Answered+res.Refused != 15 {
			t.Fatalf("ranked %d times; asked %v in %d batches (%d answered, %d refused), want %v in 4", ranked, res.Order, len(res.Batches), res.Answered, res.Refused, want)
		}
		for i, b := range res.Batches {
			if b.From != 4*i {
				t.Errorf("batch %d starts at %d of the order, want %d", i, b.From, 4*i)
			}
		}
		for q, l := range res.Labels {
			if (q == 12 && l != -1) || (l >= 0 && l != d.Y[q]) {
				t.Errorf("query %d: label %d, every teacher voted %d", q, l, d.Y[q])
			}
		}
		checkAgainstLedger(res)
		again, err := boot.Label(t.Context(), d, nil)
		if err != nil || again.Resumed != 4 || ranked != 1 || !slices.Equal(again.Labels, res.Labels) {
			t.Fatalf("a second run resumed %d of 4 batches, ranked %d times (%v), labels %v, want %v", again.Resumed, ranked, err, again.Labels, res.Labels)
		}
	})

	t.Run("a limited run asks the first queries of its order only", func(t *testing.T) {
		lim := newStudent(t, func(c *student.Config) { c.MaxQueries = 5 })
		d := dataset(12, 400)
		res, err := lim.Label(t.Context(), d, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Order, []int{0, 1, 2, 3, 4}) || len(res.Batches) != 2 || res.Answered+res.Refused != 5 || len(res.Labels) != 12 {
			t.Fatalf("asked %v in %d batches (%d answered, %d refused, %d labels), want the first 5 in 2", res.Order, len(res.Batches), res.Answered, res.Refused, len(res.Labels))
		}
		for q, l := range res.Labels {
			if (q >= 5 && l != -1) || (l >= 0 && l != d.Y[q]) {
				t.Errorf("query %d: label %d", q, l)
			}
		}
		checkAgainstLedger(res)
		again, err := lim.Label(t.Context(), d, nil)
		if err != nil || again.Resumed != 2 || !slices.Equal(again.Labels, res.Labels) {
			t.Fatalf("a second run resumed %d of 2 batches (%v)", again.Resumed, err)
		}
	})

	t.Run("a bootstrapped run in a selected order records its ranking", func(t *testing.T) {
		sel := newStudent(t, func(c *student.Config) {
			c.Selection, c.Bootstrap = selection.Config{Strategy: selection.Random, Seed: 1}, 2
			c.Rank = func(_ context.Context, d *data.Dataset, _ []int, asked []bool) ([]int, error) {
				var rest []int
				for q := range d.Len() {
					if !asked[q] {
						rest = append(rest, q)
					}
				}
				return rest, nil
			}
		})
		res, err := sel.Label(t.Context(), dataset(8, 500), nil)
		if err != nil || res.Answered+res.Refused != 8 {
			t.Fatalf("asked %d of 8 (%v)", res.Answered+res.Refused, err)
		}
		checkAgainstLedger(res)
	})

	t.Run("a crash between commit and delivery loses nothing and charges once", func(t *testing.T) {
		crashing.mu.Lock()
		crashing.armed = true
		crashing.mu.Unlock()
		d := dataset(8, 100)
		type out struct {
			res *student.Result
			err error
		}
		done := make(chan out, 1)
		go func() {
			r, err := st.Label(t.Context(), d, nil)
			done <- out{r, err}
		}()
		var batch string
		select {
		case batch = <-crashing.crashed:
		case o := <-done:
			t.Fatalf("labelling ended without the crash: %v", o.err)
		case <-time.After(30 * time.Second):
			t.Fatal("no charge was committed")
		}
		before := f.charges()[batch]
		if before == nil {
			t.Fatal("the charge was not committed before the crash")
		}
		// Restart on the same outbox and port, with the plain ledger client.
		agg = f.startAggregator(g, aggAddr, lc, aggCfg)
		o := <-done
		if o.err != nil {
			t.Fatal(o.err)
		}
		if len(o.res.Batches) != 1 || o.res.Batches[0].BatchID != batch || !o.res.Batches[0].Replayed {
			t.Fatalf("got %+v, want the charged batch %s, delivered from the outbox", o.res.Batches, batch)
		}
		checkAgainstLedger(o.res)
		if after := f.charges()[batch]; after.AnswersHash != before.AnswersHash || after.Timestamp != before.Timestamp {
			t.Fatal("the batch was charged again after the restart")
		}
	})

	t.Run("a batch over a hospital's cap is refused and not charged", func(t *testing.T) {
		big := newStudent(t, func(c *student.Config) { c.BatchSize = 400 })
		before := len(f.charges())
		d := dataset(400, 1000)
		res, err := big.Label(t.Context(), d, nil)
		if !errors.Is(err, student.ErrStopped) || !errors.Is(err, protocol.ErrBudgetExhausted) {
			t.Fatalf("got %v, want a budget-exhausted refusal", err)
		}
		if res.Answered != 0 || len(res.Batches) != 0 {
			t.Fatalf("labels were released: %+v", res)
		}
		charges := f.charges()
		if len(charges) != before || charges[hex.EncodeToString(student.BatchID(stP.ID, student.FeatureHash(d), 400, 0))] != nil {
			t.Fatal("the refused batch was charged")
		}
		t.Logf("refusal: %v", err)
	})

	t.Run("parties of another federation or role are refused", func(t *testing.T) {
		other, err := provision.Provision(t.TempDir(), provision.Spec{Hospitals: 1, Auditors: 1, Students: 1})
		if err != nil {
			t.Fatal(err)
		}
		of := &federation{t: t, m: other}
		if of.ca, err = crypto.LoadCert(other.Path(other.CACert)); err != nil {
			t.Fatal(err)
		}
		op, _ := other.Party(crypto.RoleStudent, "student-1")
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err = quicnet.Dial(ctx, aggAddr, of.net(op), crypto.RoleAggregator)
		if err == nil {
			t.Fatal("a student of another federation connected to the aggregator")
		}
		t.Logf("another CA, seen by the dialler: %v", err)
		// The same party trusting our CA is refused by the aggregator.
		foreign := of.net(op)
		foreign.CA = f.ca
		_, err = quicnet.Dial(ctx, aggAddr, foreign, crypto.RoleAggregator)
		if !errors.Is(err, quicnet.ErrRejected) {
			t.Fatalf("a student of another federation: %v, want a rejection by the aggregator", err)
		}
		t.Logf("another CA, seen by the aggregator: %v", err)

		// A student may not reach the ledger's intake (a hospital may, for
		// its own account commands only: party/auditor/intake's tests).
		_, err = quicnet.Dial(ctx, f.intakes[0], f.net(stP), crypto.RoleAuditor)
		if !errors.Is(err, quicnet.ErrRejected) {
			t.Fatalf("a student dialling the ledger intake: %v, want a rejection", err)
		}
		t.Logf("wrong role: %v", err)

		// A student may not relay ledger commands through the aggregator.
		c, err := quicnet.Dial(ctx, aggAddr, f.net(stP), crypto.RoleAggregator)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var res nzcpb.LedgerResult
		err = c.Invoke(ctx, &nzcpb.LedgerSubmit{Command: []byte{1}}, &res)
		if !errors.Is(err, protocol.ErrUnauthorized) {
			t.Fatalf("a student's ledger command: %v, want unauthorized", err)
		}
	})
	t.Run("a hospital added after the genesis registers and opens its account", func(t *testing.T) {
		m2, p, err := provision.AddParty(m.Dir, crypto.RoleHospital, "", provision.AddPartyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reg := registration(t, m2, p)
		newTeacher := func(registration []byte) *teacher.Node {
			n, err := teacher.New(teacher.Config{ID: p.ID, Aggregator: aggAddr, Net: f.net(p), Identity: f.identity(p),
				SigningKey: f.signingKey(p), CapEpsilon: capEps, CapDelta: 1e-5, Registration: registration, Voter: voter{},
				Backoff: backoff, Logger: logger(t).With("party", p.ID)})
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		// Another hospital's registration is not relayed for it.
		c, err := quicnet.Dial(t.Context(), aggAddr, f.net(f.party(crypto.RoleHospital, "hospital-1")), crypto.RoleAggregator)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var res nzcpb.LedgerResult
		if err := c.Invoke(t.Context(), &nzcpb.LedgerSubmit{Command: reg}, &res); !errors.Is(err, protocol.ErrUnauthorized) {
			t.Fatalf("hospital-1 relaying %s's registration: %v, want unauthorized", p.ID, err)
		}

		// A student configured before the admission, with the genesis
		// hospitals' recipients and the administrator's key only, labels
		// across it in one run: the batches after the aggregator passed
		// the new hospital's signed recipient (in the Ack of the ranked
		// part's connection, then in every label response) are sealed to
		// it too, and the hospital votes on them, with no change to the
		// student.
		adminPub, err := crypto.LoadPublicKey(m.Path(m.AdminVerifyingKey))
		if err != nil {
			t.Fatal(err)
		}
		var stop func()
		before := 0 // batches asked before the admission
		disc := newStudent(t, func(c *student.Config) {
			c.AdminKey, c.Window, c.Bootstrap = adminPub, 1, 4
			c.Rank = func(_ context.Context, d *data.Dataset, _ []int, asked []bool) ([]int, error) {
				// Between batch 0 and batch 1: the hospital is admitted.
				stop = group(t).Start(p.ID, newTeacher(reg).Run)
				f.waitForAccount(t, p.ID)
				waitFor(t, 20*time.Second, p.ID+" registered with the aggregator", func() bool {
					return slices.ContainsFunc(agg.Directory(), func(r *nzcpb.SignedRecipient) bool { return r.GetHospitalId() == p.ID })
				})
				var rest []int
				for q := range d.Len() {
					if !asked[q] {
						rest = append(rest, q)
					}
				}
				// The bootstrap asks batches until enough are answered:
				// one, or more when the mechanism refused some.
				before = (d.Len() - len(rest) + c.BatchSize - 1) / c.BatchSize
				// The bootstrap asks batches until enough are answered:
				// one, or more when the mechanism refused some.
				before = (d.Len() - len(rest) + c.BatchSize - 1) / c.BatchSize
				return rest, nil
			}
		})
		run, err := disc.Label(t.Context(), dataset(12, 300), nil)
		if stop != nil {
			defer stop()
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(run.Batches) != 3 {
			t.Fatalf("%d batches, want 3", len(run.Batches))
		}
		genesis := []string{"hospital-1", "hospital-2", "hospital-3"}
		all := slices.Sorted(slices.Values(append(slices.Clone(genesis), p.ID)))
		charges := f.charges()
		if before == 0 || before >= len(run.Batches) {
			t.Fatalf("%d of %d batches were asked before the admission: want some before and some after", before, len(run.Batches))
		}
		for i := range run.Batches {
			want := all
			if i < before {
				want = genesis
			}
			if ch := charges[run.Batches[i].BatchID]; ch == nil || !slices.Equal(ch.Hospitals, want) {
				t.Fatalf("batch %d was charged to %v, want %v (left out: %q)", i, ch.Hospitals, want, run.Batches[i].LeftOut)
			}
		}
	})
	t.Run("a hospital admitted while the aggregator restarts is asked from the student's next batch", func(t *testing.T) {
		m2, p, err := provision.AddParty(m.Dir, crypto.RoleHospital, "", provision.AddPartyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reg := registration(t, m2, p)
		adminPub, err := crypto.LoadPublicKey(m.Path(m.AdminVerifyingKey))
		if err != nil {
			t.Fatal(err)
		}
		n, err := teacher.New(teacher.Config{ID: p.ID, Aggregator: aggAddr, Net: f.net(p), Identity: f.identity(p),
			SigningKey: f.signingKey(p), CapEpsilon: capEps, CapDelta: 1e-5, Registration: reg, Voter: voter{},
			Backoff: backoff, Logger: logger(t).With("party", p.ID)})
		if err != nil {
			t.Fatal(err)
		}
		genesis := []string{"hospital-1", "hospital-2", "hospital-3"}
		all := slices.Sorted(slices.Values(append(slices.Clone(genesis), p.ID)))
		var stop func()
		before := 0 // batches asked before the restart
		st := newStudent(t, func(c *student.Config) {
			c.AdminKey, c.Window, c.Bootstrap = adminPub, 1, 4
			c.Rank = func(_ context.Context, d *data.Dataset, _ []int, asked []bool) ([]int, error) {
				// Between batches, while the student holds its connection:
				// the aggregator stops, the hospital is admitted, and the
				// aggregator comes back on its port, with every hospital.
				agg.Stop()
				stop = group(t).Start(p.ID, n.Run)
				agg = f.startAggregator(g, aggAddr, lc, aggCfg)
				f.waitForAccount(t, p.ID)
				waitFor(t, 20*time.Second, "every hospital back with the aggregator", func() bool {
					var ids []string
					for _, r := range agg.Directory() {
						ids = append(ids, r.GetHospitalId())
					}
					return !slices.ContainsFunc(all, func(id string) bool { return !slices.Contains(ids, id) })
				})
				var rest []int
				for q := range d.Len() {
					if !asked[q] {
						rest = append(rest, q)
					}
				}
				before = (d.Len() - len(rest) + c.BatchSize - 1) / c.BatchSize
				return rest, nil
			}
		})
		run, err := st.Label(t.Context(), dataset(12, 400), nil)
		if stop != nil {
			defer stop()
		}
		if err != nil {
			t.Fatal(err)
		}
		charges := f.charges()
		if before == 0 || before >= len(run.Batches) {
			t.Fatalf("%d of %d batches were asked before the restart: want some before and some after", before, len(run.Batches))
		}
		for i, b := range run.Batches {
			want := all
			if i < before {
				want = genesis
			}
			if ch := charges[b.BatchID]; ch == nil || !slices.Equal(ch.Hospitals, want) {
				t.Fatalf("batch %d was charged to %v, want %v (left out: %q)", i, ch.Hospitals, want, b.LeftOut)
			}
		}
	})
	t.Run("a hospital that made its own keys joins by a key request", func(t *testing.T) {
		// The hospital makes its keys where it runs; the administrator sees
		// only the request, issues a certificate and signs a registration.
		keys := t.TempDir()
		req, err := provision.NewKeyRequest(keys, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-own-keys"}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		m2, p, err := provision.AddPartyFromRequest(m.Dir, req, req.Peer(), provision.AddPartyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reg := registration(t, m2, p)
		cred, err := crypto.LoadCredential(m2.Path(p.Cert), filepath.Join(keys, crypto.PartyKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		id, err := crypto.LoadIdentity(filepath.Join(keys, crypto.AgeIdentityFile))
		if err != nil {
			t.Fatal(err)
		}
		sign, err := crypto.LoadPrivateKey(filepath.Join(keys, crypto.SigningKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		n, err := teacher.New(teacher.Config{ID: p.ID, Aggregator: aggAddr,
			Net:      quicnet.Config{CA: f.ca, Credential: cred, Logger: logger(t).With("party", p.ID)},
			Identity: id, SigningKey: sign, CapEpsilon: capEps, CapDelta: 1e-5, Registration: reg, Voter: voter{},
			Backoff: backoff, Logger: logger(t).With("party", p.ID)})
		if err != nil {
			t.Fatal(err)
		}
		stop := group(t).Start(p.ID, n.Run)
		defer stop()
		f.waitForAccount(t, p.ID)
		// Nothing the administrator holds is one of the hospital's secrets.
		secrets := [][]byte{[]byte(id.SecretString()), cred.Key.Seed(), sign.Seed()}
		err = filepath.WalkDir(m.Dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			for _, s := range secrets {
				if bytes.Contains(data, s) {
					t.Errorf("the administrator's %s holds a private key of %s", path, p.ID)
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// waitForAccount waits until the ledger has opened hospital id's budget
// account.
func (f *federation) waitForAccount(t *testing.T, id string) {
	t.Helper()
	waitFor(t, 20*time.Second, id+"'s budget account", func() bool {
		for _, a := range f.machines[0].State().Accounts() {
			if a.Hospital == id {
				return true
			}
		}
		return false
	})
}

// auditorKeys are the auditors' checkpoint verifier keys, as the aggregator
// and the students pin them.
func (f *federation) auditorKeys() []string {
	f.t.Helper()
	keys, err := compliance.AuditorKeys(f.m)
	if err != nil {
		f.t.Fatal(err)
	}
	return keys
}

// registration is the administrator's signed registration of hospital p,
// added to the federation m after its genesis.
func registration(t *testing.T, m *crypto.Manifest, p crypto.PartyFiles) []byte {
	t.Helper()
	adminKey, err := m.AdminSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := provision.RegisterHospital(m, p, adminKey, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// signalHandler passes records on to its Handler; at the first whose
// message starts with prefix it closes seen and holds the logging party
// until release is closed.
type signalHandler struct {
	slog.Handler
	prefix        string
	once          *sync.Once
	seen, release chan struct{}
}

func (h signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.once.Do(func() {
			close(h.seen)
			<-h.release
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h signalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(as)
	return h
}

func (h signalHandler) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}

// A student that lists no hospital, started before any hospital has
// registered with the aggregator, registers again until the founding
// hospitals have, then seals to them all.
func TestStudentWithoutHospitalsWaitsForThem(t *testing.T) {
	f := newFederation(t, 1, nil)
	startAuditors(t, f)
	g := group(t)
	agg := f.startAggregator(g, "127.0.0.1:0", f.ledgerClient(), aggregator.Config{
		OutboxDir: t.TempDir(), Mechanism: mechanism.Params{Mechanism: mechanism.ConfidentGNMax, Threshold: 18, Sigma1: 10, Sigma2: 5},
		Quorum: 3, Hospitals: 3, BatchDeadline: 10 * time.Second, Classes: classes, Ensemble: teachers,
	})
	adminPub, err := crypto.LoadPublicKey(f.m.Path(f.m.AdminVerifyingKey))
	if err != nil {
		t.Fatal(err)
	}
	// The student is held at its first wait until every hospital has
	// registered, so that it then learns them all at once.
	waiting := signalHandler{Handler: logger(t).Handler(), prefix: "no hospital to seal", once: new(sync.Once),
		seen: make(chan struct{}), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(waiting.release) })
	t.Cleanup(release)
	stP := f.party(crypto.RoleStudent, "student-1")
	st, err := student.New(student.Config{ID: stP.ID, Aggregator: agg.Addr, Net: f.net(stP), Identity: f.identity(stP), AuditorKeys: f.auditorKeys(),
		AdminKey: adminPub, BatchSize: 4, StateDir: t.TempDir(), Attempts: 50,
		Backoff: quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond}, Logger: slog.New(waiting).With("party", "student")})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		res *student.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := st.Label(t.Context(), dataset(4, 0), nil)
		done <- result{res, err}
	}()
	select {
	case <-waiting.seen:
	case r := <-done:
		t.Fatalf("the student finished before any hospital registered: %v", r.err)
	case <-t.Context().Done():
		t.Fatal(t.Context().Err())
	}
	f.startHospitals(g, agg, capEps, func(int) teacher.Voter { return voter{} })
	release()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	f.checkCharges(r.res, "student-1", "hospital-1", "hospital-2", "hospital-3")
}
