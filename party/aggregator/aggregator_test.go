package aggregator

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"google.golang.org/protobuf/proto"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// fakeLedger is the real ledger state machine in memory, recording every
// proposed command. fail, when set, decides per call whether the ledger is
// unreachable (before applying) or "crashes" after applying.
type fakeLedger struct {
	m *auditor.Ledger
	// cosigners add their signatures to m's checkpoint in receipts: with
	// m's own, a majority of the federation's three auditors.
	cosigners []note.Signer
	// receipts is how the fake answers a commit: "" with a majority's
	// receipt, "none" without one, "alone" with one auditor's signature.
	receipts string

	mu        sync.Mutex
	submitted [][]byte
	// down and lostReply hold for every command but a reservation: the
	// ledger fails after a batch was admitted. downAll fails reservations
	// too.
	down      bool // unreachable: nothing applied
	lostReply bool // applies, then the reply is lost
	downAll   bool
}

// isReservation reports whether cmd is a ledger.Reserve.
func isReservation(cmd []byte) bool {
	c, err := ledger.DecodeCommand(cmd)
	_, ok := c.Body.(*ledger.Reserve)
	return err == nil && ok
}

// charged returns the submitted commands that are not reservations: what
// reached the ledger after a batch's votes.
func (l *fakeLedger) charged() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]byte
	for _, cmd := range l.submitted {
		if !isReservation(cmd) {
			out = append(out, cmd)
		}
	}
	return out
}

func (l *fakeLedger) Submit(_ context.Context, cmd []byte) (*nzcpb.LedgerResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	reservation := isReservation(cmd)
	if l.downAll || l.down && !reservation {
		return nil, errors.New("connection refused")
	}
	l.submitted = append(l.submitted, cmd)
	b, err := l.m.Apply(0, cmd)
	if err != nil {
		return nil, err
	}
	r, err := ledger.DecodeResult(b)
	if err != nil {
		return nil, err
	}
	if l.lostReply && !reservation {
		return nil, errors.New("connection lost after the charge was sent")
	}
	out := intake.ToWire(r)
	if c := out.GetCode(); (c == nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED || c == nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE) && l.receipts != "none" {
		cp, err := l.m.Checkpoint(uint64(l.m.State().TreeSize()))
		if err != nil {
			return nil, err
		}
		if l.receipts != "alone" {
			if cp, err = ledger.AddSignatures(cp, l.cosigners...); err != nil {
				return nil, err
			}
		}
		rcpt, err := l.m.State().Receipt(int64(out.GetIndex()), cp)
		if err != nil {
			return nil, err
		}
		out.Receipt = protocol.ReceiptToWire(rcpt)
	}
	return out, nil
}

func (l *fakeLedger) Budget(_ context.Context, req *nzcpb.BudgetRequest) (*nzcpb.BudgetResponse, error) {
	return intake.Budgets(l.m.State(), req), nil
}

func (l *fakeLedger) set(down, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down, l.lostReply = down, lost
}

// charges returns the accepted charges in the ledger, by batch id.
func (l *fakeLedger) charges(t *testing.T) map[string]*ledger.Charge {
	t.Helper()
	s := l.m.State()
	entries, err := s.Entries(0, s.TreeSize())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*ledger.Charge{}
	for _, b := range entries {
		e, err := ledger.DecodeEntry(b)
		if err != nil {
			t.Fatal(err)
		}
		if e.Status != ledger.StatusAccepted {
			continue
		}
		c, err := ledger.DecodeCommand(e.Command)
		if err != nil {
			t.Fatal(err)
		}
		if ch, ok := c.Body.(*ledger.Charge); ok {
			if out[ch.BatchID] != nil {
				t.Fatalf("batch %s charged twice", ch.BatchID)
			}
			out[ch.BatchID] = ch
		}
	}
	return out
}

// fakeHospital opens the features and lets its teachers vote: teacher t
// votes class (round(x[0]) + t/skip) mod classes, so with a large skip
// every teacher agrees on class x[0].
type fakeHospital struct {
	id       string
	identity *crypto.Identity
	agg      *crypto.Recipient
	teachers int
	classes  int
	block    bool // never answers (until ctx ends)
	split    bool // half the teachers vote the next class: distance to instability 0
	against  bool // every teacher votes the next class, against the others
	calls    int
	proofs   []*nzcpb.Receipt // the charge receipts handed over
	mu       sync.Mutex
}

func (h *fakeHospital) Query(ctx context.Context, q *nzcpb.QueryBatch) (*nzcpb.VoteBatch, error) {
	h.mu.Lock()
	h.calls++
	h.proofs = append(h.proofs, q.GetChargeReceipts()...)
	h.mu.Unlock()
	if h.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	plain, err := crypto.Open(q.GetSealedFeatures(), h.identity)
	if err != nil {
		return nil, err
	}
	var f nzcpb.Features
	if err := protocol.DecodePlain(plain, &f); err != nil {
		return nil, err
	}
	nq, dim, nc := int(f.GetNumQueries()), int(f.GetFeatureDim()), int(q.GetNumClasses())
	counts := make([]uint32, nq*nc)
	for i := range nq {
		c := int(f.GetValues()[i*dim]) % nc
		if h.against {
			c = (c + 1) % nc
		}
		if h.split {
			counts[i*nc+c] += uint32(h.teachers / 2)
			counts[i*nc+(c+1)%nc] += uint32(h.teachers - h.teachers/2)
			continue
		}
		counts[i*nc+c] += uint32(h.teachers)
	}
	hb, err := protocol.Marshal(&nzcpb.Histograms{NumQueries: uint32(nq), NumClasses: uint32(nc), NumTeachers: uint32(h.teachers), Counts: counts})
	if err != nil {
		return nil, err
	}
	sealed, err := crypto.Seal(hb, h.agg)
	if err != nil {
		return nil, err
	}
	return &nzcpb.VoteBatch{BatchId: q.GetBatchId(), HospitalId: h.id, NumQueries: q.GetNumQueries(), NumClasses: q.GetNumClasses(), SealedHistograms: sealed}, nil
}

type fixture struct {
	m         *crypto.Manifest
	led       *fakeLedger
	hospitals []*fakeHospital
	student   *crypto.Identity
	hospRecip []*crypto.Recipient
	cfg       Config
}

const classes = 4

// newFixture provisions a federation of n hospitals with caps ε, opens
// their accounts and registers the student in an in-memory ledger.
func newFixture(t *testing.T, n int, capEps float64) *fixture {
	t.Helper()
	return newFixtureWith(t, n, capEps, rules{})
}

// rules are the ledger's limits on each student beyond the hospitals'
// caps.
type rules struct {
	share float64 // of a hospital's cap ε, fixed by the genesis (0: none, the whole cap)
	quota uint64  // answers, fixed by the student's registration (0: none)
}

// newFixtureWith is newFixture under the given limits on each student.
func newFixtureWith(t *testing.T, n int, capEps float64, r rules) *fixture {
	t.Helper()
	dir := t.TempDir()
	m := cryptotest.Federation(t, dir, cryptotest.Spec{Hospitals: n, Auditors: 3, Students: 2})
	ca := cryptotest.CA(t, m)
	now := time.Unix(1_800_000_000, 0)
	// The genesis's cap bound admits every test's cap.
	cmds := genesis(t, m, ca.Key(), "nzc.test/ledger", now, max(capEps, ledger.DefaultEpsilonBound), r)
	aud := m.ByRole(crypto.RoleAuditor)[0]
	mach, err := auditor.NewLedger(ledger.New(), aud.ID, cryptotest.SigningKey(t, m, aud), nil)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(cmd []byte) {
		t.Helper()
		b, err := mach.Apply(0, cmd)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ledger.DecodeResult(b)
		if err != nil || r.Status != ledger.StatusAccepted {
			t.Fatalf("setup command refused: %+v %v", r, err)
		}
	}
	for _, c := range cmds {
		apply(c)
	}
	agg := m.ByRole(crypto.RoleAggregator)[0]
	aggID := cryptotest.Identity(t, m, agg)
	aud2 := m.ByRole(crypto.RoleAuditor)[1]
	cosigner, err := ledger.NewCheckpointSigner(aud2.ID, cryptotest.SigningKey(t, m, aud2), time.Now().Unix())
	if err != nil {
		t.Fatal(err)
	}
	auditorKeys, err := compliance.AuditorKeys(m)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{m: m, led: &fakeLedger{m: mach, cosigners: []note.Signer{cosigner}}}
	for _, h := range m.ByRole(crypto.RoleHospital) {
		c, err := ledger.Sign(&ledger.OpenAccount{Hospital: h.ID, CapEpsilon: capEps, CapDelta: 1e-5, Timestamp: now.UnixNano()}, h.ID, cryptotest.SigningKey(t, m, h))
		if err != nil {
			t.Fatal(err)
		}
		apply(c)
		hid := cryptotest.Identity(t, m, h)
		f.hospitals = append(f.hospitals, &fakeHospital{id: h.ID, identity: hid, agg: aggID.Recipient(), teachers: 20, classes: classes})
		f.hospRecip = append(f.hospRecip, hid.Recipient())
	}
	f.student = cryptotest.Identity(t, m, m.ByRole(crypto.RoleStudent)[0])
	f.cfg = Config{
		ID: agg.ID, Identity: aggID, SigningKey: cryptotest.SigningKey(t, m, agg), OutboxDir: t.TempDir(),
		Mechanism: mechanism.Params{Mechanism: mechanism.ConfidentGNMax, Threshold: 0.6 * float64(20*n), Sigma1: 4, Sigma2: 2},
		Quorum:    n, BatchDeadline: 2 * time.Second, Ledger: f.led, AuditorKeys: auditorKeys,
		Classes: classes, Ensembles: map[string]int{},
		Rand: rand.NewChaCha8([32]byte{7}), Now: func() time.Time { return now },
	}
	for _, h := range f.hospitals {
		f.cfg.Ensembles[h.id] = h.teachers
	}
	return f
}

// genesis returns the commands that start m's ledger, as the
// administrator signs them with admin at now: the genesis of m's parties
// (intake.Directory), then each student's registration, under the limits r.
func genesis(t *testing.T, m *crypto.Manifest, admin ed25519.PrivateKey, origin string, now time.Time, epsilonBound float64, r rules) [][]byte {
	t.Helper()
	parties, err := intake.Directory(m, admin.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	g, err := ledger.Sign(&ledger.Genesis{Origin: origin, Parties: parties, EpsilonBound: epsilonBound, DeltaBound: ledger.DefaultDeltaBound,
		StudentShare: r.share, Timestamp: now.UnixNano()}, intake.AdminID, admin)
	if err != nil {
		t.Fatal(err)
	}
	cmds := [][]byte{g}
	for _, s := range m.ByRole(crypto.RoleStudent) {
		c, err := ledger.Sign(&ledger.RegisterStudent{Student: s.ID, MaxAnswers: r.quota, Timestamp: now.UnixNano()}, intake.AdminID, admin)
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	return cmds
}

func (f *fixture) start(t *testing.T, cfg Config) *Aggregator {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range f.hospitals {
		if _, err := a.AddHospital(h.id, h.teachers, h.classes, h); err != nil {
			t.Fatal(err)
		}
	}
	a.AddStudent("student-1", f.student.Recipient())
	return a
}

// request makes a batch whose query i has feature value (i mod classes).
// label asks a for the labels of req as student-1 and requires an answer.
func label(t *testing.T, a *Aggregator, req *nzcpb.LabelRequest) *nzcpb.LabelResponse {
	t.Helper()
	resp, err := a.Label(t.Context(), "student-1", req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (f *fixture) request(t *testing.T, id byte, nq int) (*nzcpb.LabelRequest, []int32) {
	t.Helper()
	const dim = 3
	vals := make([]float32, nq*dim)
	want := make([]int32, nq)
	for i := range nq {
		vals[i*dim] = float32(i % classes)
		want[i] = int32(i % classes)
	}
	plain, err := protocol.Marshal(&nzcpb.Features{NumQueries: uint32(nq), FeatureDim: dim, Values: vals})
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := crypto.Seal(plain, f.hospRecip...)
	if err != nil {
		t.Fatal(err)
	}
	bid := make([]byte, 16)
	bid[0] = id
	return &nzcpb.LabelRequest{BatchId: bid, NumQueries: uint32(nq), FeatureDim: dim, SealedFeatures: sealed}, want
}

// open checks a response against the ledger and returns its labels.
func (f *fixture) open(t *testing.T, resp *nzcpb.LabelResponse) *nzcpb.Labels {
	t.Helper()
	plain, err := crypto.Open(resp.GetSealedLabels(), f.student)
	if err != nil {
		t.Fatal(err)
	}
	var l nzcpb.Labels
	if err := protocol.DecodePlain(plain, &l); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(plain)
	if string(h[:]) != string(resp.GetAnswersHash()) {
		t.Fatal("answers hash in the response does not match the labels")
	}
	// The student's own check: a majority's receipt of exactly this charge.
	rcpt, ok, err := protocol.ReceiptFromWire(resp.GetReceipt())
	if err != nil || !ok {
		t.Fatalf("no receipt with the labels: %v", err)
	}
	receipts, err := ledger.NewVerifier(f.cfg.AuditorKeys)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := receipts.ChargeReceipt(rcpt, hex.EncodeToString(resp.GetBatchId()), "student-1", l.GetLabels(), h); err != nil {
		t.Fatalf("the student cannot verify the receipt: %v", err)
	}
	return &l
}

// Each hospital charged for a batch gets its receipt with its next query
// batch, and can check it names it against the pinned auditor keys.
func TestHospitalsGetTheirChargeReceipts(t *testing.T) {
	f := newFixture(t, 3, 50)
	a := f.start(t, f.cfg)
	req, _ := f.request(t, 1, 4)
	label(t, a, req)
	req2, _ := f.request(t, 2, 4)
	label(t, a, req2)
	f.wantOneProof(t, req)
}

// wantOneProof requires every hospital to have been handed exactly one
// receipt, proving its charge for the batch of req.
func (f *fixture) wantOneProof(t *testing.T, req *nzcpb.LabelRequest) {
	t.Helper()
	receipts, err := ledger.NewVerifier(f.cfg.AuditorKeys)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range f.hospitals {
		h.mu.Lock()
		proofs := h.proofs
		h.mu.Unlock()
		if len(proofs) != 1 {
			t.Fatalf("%s was handed %d receipts, want the one of batch %s", h.id, len(proofs), batchHex(req))
		}
		r, _, err := protocol.ReceiptFromWire(proofs[0])
		if err != nil {
			t.Fatal(err)
		}
		ch, _, _, err := receipts.HospitalReceipt(r, h.id)
		if err != nil || ch.BatchID != batchHex(req) {
			t.Fatalf("%s: receipt of %v (%v), want batch %s", h.id, ch, err, batchHex(req))
		}
	}
}

// A restarted aggregator hands the receipts of the batches committed
// before it stopped again: the queue was in memory, and a hospital counts
// a charge it never saw as unproven.
func TestRecoverHandsReceiptsAgain(t *testing.T) {
	f := newFixture(t, 3, 50)
	a := f.start(t, f.cfg)
	req, _ := f.request(t, 1, 4)
	label(t, a, req)
	b := f.start(t, f.cfg) // the same outbox, after a restart
	if err := b.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	req2, _ := f.request(t, 2, 4)
	label(t, b, req2)
	f.wantOneProof(t, req)
}

func TestReleaseAfterCommitAndReplay(t *testing.T) {
	f := newFixture(t, 3, 50)
	a := f.start(t, f.cfg)
	req, want := f.request(t, 1, 12)
	resp := label(t, a, req)
	if resp.GetReplayed() {
		t.Error("first answer marked replayed")
	}
	labels := f.open(t, resp)
	for i, l := range labels.GetLabels() {
		if !labels.GetRefused()[i] && l != want[i] {
			t.Errorf("query %d: label %d, all teachers voted %d", i, l, want[i])
		}
	}
	charges := f.led.charges(t)
	ch := charges[batchHex(req)]
	if len(charges) != 1 || ch == nil {
		t.Fatalf("ledger holds %d charges, want 1 for the batch", len(charges))
	}
	if string(ch.AnswersHash[:]) != string(resp.GetAnswersHash()) {
		t.Error("the ledger's answers hash differs from the released labels'")
	}
	if len(ch.Hospitals) != 3 || ch.Queries != 12 {
		t.Errorf("charge names %v hospitals and %d queries", ch.Hospitals, ch.Queries)
	}

	again := label(t, a, req)
	if !again.GetReplayed() || string(again.GetSealedLabels()) != string(resp.GetSealedLabels()) {
		t.Error("a retry did not return the identical answers")
	}
	if n := len(f.led.charges(t)); n != 1 {
		t.Errorf("after a retry the ledger holds %d charges", n)
	}
	for _, h := range f.hospitals {
		if h.calls != 1 {
			t.Errorf("hospital %s was asked %d times; a retry must not query again", h.id, h.calls)
		}
	}
	if _, err := a.Label(t.Context(), "student-2", req); !errors.Is(err, protocol.ErrBadRequest) {
		t.Errorf("another student reusing the batch id: %v", err)
	}
}

func batchHex(req *nzcpb.LabelRequest) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(req.GetBatchId()))
	for _, b := range req.GetBatchId() {
		out = append(out, digits[b>>4], digits[b&15])
	}
	return string(out)
}

func TestBudgetRefusalReleasesNothing(t *testing.T) {
	f := newFixture(t, 2, 0.01)
	a := f.start(t, f.cfg)
	req, _ := f.request(t, 2, 8)
	_, err := a.Label(t.Context(), "student-1", req)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeBudgetExhausted {
		t.Fatalf("got %v, want a budget-exhausted refusal", err)
	}
	if len(f.led.charges(t)) != 0 {
		t.Error("a refused batch was charged")
	}
	if p, _ := a.outbox.Pending(); len(p) != 0 {
		t.Error("a refused batch stayed in the outbox")
	}
	if _, ok, _ := a.outbox.Get("student-1", batchHex(req)); ok {
		t.Error("a refused batch's answers were kept")
	}
}

func TestQuorumAndDeadline(t *testing.T) {
	f := newFixture(t, 3, 50)
	f.hospitals[2].block = true
	cfg := f.cfg
	cfg.BatchDeadline = 200 * time.Millisecond
	cfg.Now = time.Now
	a := f.start(t, cfg)
	req, _ := f.request(t, 3, 4)
	_, err := a.Label(t.Context(), "student-1", req)
	if !errors.Is(err, protocol.ErrQuorumNotMet) {
		t.Fatalf("2 of 3 votes with quorum 3: got %v, want quorum-not-met", err)
	}
	if len(f.led.charged()) != 0 {
		t.Error("a batch without quorum was charged")
	}

	cfg.Quorum = 2
	cfg.OutboxDir = t.TempDir()
	a = f.start(t, cfg)
	resp := label(t, a, req)
	f.open(t, resp)
	f.wantChargedTo(t, req, "hospital-1", "hospital-2")
	if ok, why := a.Ready(); !ok {
		t.Errorf("not ready with 3 hospitals: %s", why)
	}
}

func TestReadinessSaysWhatItWaitsFor(t *testing.T) {
	f := newFixture(t, 3, 50)
	a, err := New(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	remove, err := a.AddHospital("hospital-1", 20, classes, f.hospitals[0])
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := a.Ready(); ok || why != "waiting for 2 of 3 hospitals (1 connected, quorum 3)" {
		t.Errorf("Ready() = %v, %q", ok, why)
	}
	remove()
	if _, why := a.Ready(); why != "waiting for 3 of 3 hospitals (0 connected, quorum 3)" {
		t.Errorf("after a disconnect: %q", why)
	}
	if _, err := a.AddHospital("hospital-2", 20, classes+1, f.hospitals[1]); !errors.Is(err, protocol.ErrBadRequest) {
		t.Errorf("a hospital with another class count: %v", err)
	}
}

// One auditor's word is not a commit: an auditor (or a modified binary)
// that answers COMMITTED without a receipt, or with a checkpoint only it
// signed, gets nothing released. The batch stays pending and, once a
// majority's receipt comes back, the student gets the same answers with a
// receipt it can check itself, charged once.
func TestReleaseNeedsAMajorityReceipt(t *testing.T) {
	for _, mode := range []string{"none", "alone"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t, 2, 50)
			a := f.start(t, f.cfg)
			req, _ := f.request(t, 9, 6)
			f.led.receipts = mode
			resp, err := a.Label(t.Context(), "student-1", req)
			if !errors.Is(err, protocol.ErrLedgerUnavailable) || resp != nil {
				t.Fatalf("released on one auditor's word: %v, %v", resp, err)
			}
			kept := onePending(t, a)
			f.led.receipts = ""
			f.open(t, f.retryGetsPending(t, a, req, kept)) // checks the receipt as the student does
		})
	}
}

func TestLedgerUnavailableKeepsBatchPending(t *testing.T) {
	f := newFixture(t, 2, 50)
	a := f.start(t, f.cfg)
	req, _ := f.request(t, 4, 6)
	f.led.set(true, false)
	_, err := a.Label(t.Context(), "student-1", req)
	if !errors.Is(err, protocol.ErrLedgerUnavailable) {
		t.Fatalf("got %v, want ledger-unavailable", err)
	}
	kept := onePending(t, a)
	f.led.set(false, false)
	f.retryGetsPending(t, a, req, kept)
}

// wantChargedTo requires the ledger's charge for the batch of req to name
// exactly hospitals, in order: only the hospitals whose votes were counted.
func (f *fixture) wantChargedTo(t *testing.T, req *nzcpb.LabelRequest, hospitals ...string) {
	t.Helper()
	ch := f.led.charges(t)[batchHex(req)]
	if ch == nil || !slices.Equal(ch.Hospitals, hospitals) {
		t.Fatalf("charge %+v: want %v only", ch, hospitals)
	}
}

// onePending requires the outbox to keep exactly one batch, the refused
// one, and returns its stored answers.
func onePending(t *testing.T, a *Aggregator) []byte {
	t.Helper()
	p, _ := a.outbox.Pending()
	if len(p) != 1 {
		t.Fatalf("%d pending batches, want the refused one kept", len(p))
	}
	return p[0].SealedLabels
}

// retryGetsPending labels req again once the ledger answers: the student
// must get the kept answers, not fresh ones, charged once.
func (f *fixture) retryGetsPending(t *testing.T, a *Aggregator, req *nzcpb.LabelRequest, kept []byte) *nzcpb.LabelResponse {
	t.Helper()
	resp := label(t, a, req)
	if string(resp.GetSealedLabels()) != string(kept) {
		t.Error("the retry drew fresh answers instead of the pending ones")
	}
	if n := len(f.led.charges(t)); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
	return resp
}

// A crash between the ledger's commit and the delivery: the restarted
// aggregator re-proposes the identical charge (a duplicate for the ledger)
// and delivers the stored answers.
func TestCrashBetweenCommitAndDelivery(t *testing.T) {
	f := newFixture(t, 2, 50)
	a := f.start(t, f.cfg)
	req, _ := f.request(t, 5, 6)
	f.led.set(false, true)
	if _, err := a.Label(t.Context(), "student-1", req); err == nil {
		t.Fatal("labels released although the commit was never confirmed")
	}
	charges := f.led.charges(t)
	if len(charges) != 1 {
		t.Fatalf("%d charges after the lost reply, want 1", len(charges))
	}
	f.led.set(false, false)

	b := f.start(t, f.cfg) // same outbox
	if err := b.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p, _ := b.outbox.Pending(); len(p) != 0 {
		t.Fatalf("%d batches still pending after recovery", len(p))
	}
	resp := label(t, b, req)
	f.open(t, resp)
	if !resp.GetReplayed() {
		t.Error("delivery after recovery not marked replayed")
	}
	after := f.led.charges(t)
	if len(after) != 1 || after[batchHex(req)].AnswersHash != charges[batchHex(req)].AnswersHash {
		t.Error("recovery charged again or changed the answers")
	}
	for _, h := range f.hospitals {
		if h.calls != 1 {
			t.Errorf("hospital %s asked %d times: recovery must not draw fresh answers", h.id, h.calls)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	f := newFixture(t, 1, 1)
	for name, mut := range map[string]func(*Config){
		"no ledger":  func(c *Config) { c.Ledger = nil },
		"no quorum":  func(c *Config) { c.Quorum = 0 },
		"bad sigma":  func(c *Config) { c.Mechanism.Sigma2 = 0 },
		"no outbox":  func(c *Config) { c.OutboxDir = "" },
		"no signing": func(c *Config) { c.SigningKey = nil },
	} {
		c := f.cfg
		mut(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// nzc-svt: the session's whole cost is charged once, when it opens; its
// batches are recorded at no further cost; once it has refused K queries
// the rest of the batch is refused unseen and the next batch opens (and
// pays for) a new session.
func TestSparseVectorSessions(t *testing.T) {
	f := newFixture(t, 2, 50)
	for _, h := range f.hospitals {
		h.teachers = 200 // 400 in all: a unanimous query is 200 votes from instability, twice the threshold
		f.cfg.Ensembles[h.id] = h.teachers
	}
	cfg := f.cfg
	cfg.Quorum = 2
	cfg.Mechanism = mechanism.Params{Mechanism: mechanism.NZCSVT, Threshold: 100, Scale: 1, MaxRefusals: 3}
	a := f.start(t, cfg)

	opens := func() []*ledger.OpenSession {
		s := f.led.m.State()
		entries, err := s.Entries(0, s.TreeSize())
		if err != nil {
			t.Fatal(err)
		}
		var out []*ledger.OpenSession
		for _, b := range entries {
			e, _ := ledger.DecodeEntry(b)
			c, err := ledger.DecodeCommand(e.Command)
			if err != nil || e.Status != ledger.StatusAccepted {
				continue
			}
			if o, ok := c.Body.(*ledger.OpenSession); ok {
				out = append(out, o)
			}
		}
		return out
	}
	// Two confident batches: one session, opened once.
	for id := byte(10); id < 12; id++ {
		req, want := f.request(t, id, 8)
		resp := label(t, a, req)
		l := f.open(t, resp)
		for i, got := range l.GetLabels() {
			if got != want[i] {
				t.Errorf("batch %d query %d: %d, want the exact argmax %d", id, i, got, want[i])
			}
		}
		ch := f.led.charges(t)[batchHex(req)]
		if ch == nil || ch.Session == "" || ch.Queries != 8 {
			t.Fatalf("charge %+v: want one in the session", ch)
		}
	}
	if n := len(opens()); n != 1 {
		t.Fatalf("%d sessions opened for two batches, want 1", n)
	}
	spent := f.led.m.State().Accounts()[0].Epsilon

	// A batch of unstable queries exhausts the session.
	for _, h := range f.hospitals {
		h.split = true
	}
	req, _ := f.request(t, 12, 12)
	resp := label(t, a, req)
	l := f.open(t, resp)
	ch := f.led.charges(t)[batchHex(req)]
	refused := 0
	for _, r := range l.GetRefused() {
		if r {
			refused++
		}
	}
	if ch.Queries-ch.Answers > 3 || ch.Queries >= 12 || refused != 12-int(ch.Answers) {
		t.Fatalf("charge of %d queries, %d answers, %d refused labels: the session must stop at its 3rd refusal", ch.Queries, ch.Answers, refused)
	}
	if got := f.led.m.State().Accounts()[0].Epsilon; got != spent {
		t.Errorf("a batch inside the session changed the spend from %v to %v", spent, got)
	}
	// The next batch opens a new session.
	for _, h := range f.hospitals {
		h.split = false
	}
	req, _ = f.request(t, 13, 4)
	label(t, a, req)
	if os := opens(); len(os) != 2 || os[0].SessionID == os[1].SessionID {
		t.Fatalf("%d sessions after the first was exhausted, want 2", len(os))
	}
	if got := f.led.m.State().Accounts()[0].Epsilon; !(got > spent) {
		t.Errorf("the second session was not charged: ε %v then %v", spent, got)
	}
}

// hangingLedger never answers a charge: its auditors have no majority.
type hangingLedger struct{ *fakeLedger }

func (l hangingLedger) Submit(ctx context.Context, cmd []byte) (*nzcpb.LedgerResult, error) {
	if isReservation(cmd) {
		return l.fakeLedger.Submit(ctx, cmd)
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// refusedInTime labels req through a ledger that never answers: a must
// refuse it with ledger-unavailable well before within, the test's own
// deadline.
func refusedInTime(t *testing.T, a *Aggregator, req *nzcpb.LabelRequest, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	_, err := a.Label(ctx, "student-1", req)
	if !errors.Is(err, protocol.ErrLedgerUnavailable) || ctx.Err() != nil {
		t.Fatalf("got %v (test context: %v), want ledger-unavailable before the test's own deadline of %s", err, ctx.Err(), within)
	}
}

// A ledger that never answers must not hold the student without end: after
// LedgerTimeout the batch is refused with ledger-unavailable and stays
// pending.
func TestLedgerThatNeverAnswersIsRefusedInTime(t *testing.T) {
	f := newFixture(t, 2, 50)
	cfg := f.cfg
	cfg.Ledger, cfg.LedgerTimeout = hangingLedger{f.led}, 50*time.Millisecond
	a := f.start(t, cfg)
	req, _ := f.request(t, 5, 3)
	refusedInTime(t, a, req, 30*time.Second)
	if p, _ := a.outbox.Pending(); len(p) != 1 {
		t.Fatalf("%d pending batches, want 1", len(p))
	}
}

func TestLabelResponsePassesConnectedHospitalsSignedRecipients(t *testing.T) {
	f := newFixture(t, 4, 50)
	cfg := f.cfg
	cfg.Suspended, cfg.Quorum = []string{"hospital-4"}, 3
	a := f.start(t, cfg)
	sr := func(id string) *nzcpb.SignedRecipient {
		return &nzcpb.SignedRecipient{HospitalId: id, AgeRecipient: f.student.Recipient().String(),
			Signature: bytes.Repeat([]byte{id[len(id)-1]}, 64), Registration: []byte("registration of " + id)}
	}
	// A suspended hospital is never asked, so it is not passed either.
	for _, id := range []string{"hospital-3", "hospital-4", "hospital-1"} {
		a.SetRecipient(sr(id))
	}
	// A hospital that is not connected is not passed, whatever it sent.
	a.SetRecipient(sr("hospital-9"))
	req, _ := f.request(t, 1, 4)
	resp := label(t, a, req)
	want := []*nzcpb.SignedRecipient{sr("hospital-1"), sr("hospital-3")}
	if got := resp.GetHospitals(); !slices.EqualFunc(got, want, func(x, y *nzcpb.SignedRecipient) bool { return proto.Equal(x, y) }) {
		t.Fatalf("the label response passes %v, want %v", got, want)
	}
	if err := protocol.Validate(resp); err != nil {
		t.Fatalf("the response does not validate: %v", err)
	}
}
