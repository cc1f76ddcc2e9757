package aggregator

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/internal/syncbuf"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// hostileHospital answers like its honest inner hospital, then tampers
// with the vote batch it sends.
type hostileHospital struct {
	*fakeHospital
	t      *testing.T
	aggID  *crypto.Identity
	tamper func(v *votes)
}

// votes is a vote batch being tampered with: the hospital could build any
// histograms it likes; the test starts from the honest ones.
type votes struct {
	t  *testing.T
	vb *nzcpb.VoteBatch
	h  *hostileHospital
}

func (v *votes) histograms() *nzcpb.Histograms {
	v.t.Helper()
	plain, err := crypto.Open(v.vb.GetSealedHistograms(), v.h.aggID)
	if err != nil {
		v.t.Fatal(err)
	}
	var hist nzcpb.Histograms
	if err := protocol.DecodePlain(plain, &hist); err != nil {
		v.t.Fatal(err)
	}
	return &hist
}

func (v *votes) seal(plain []byte) {
	v.t.Helper()
	sealed, err := crypto.Seal(plain, v.h.agg)
	if err != nil {
		v.t.Fatal(err)
	}
	v.vb.SealedHistograms = sealed
}

func (v *votes) reseal(hist *nzcpb.Histograms) {
	v.t.Helper()
	b, err := protocol.Marshal(hist) // encodes without validating
	if err != nil {
		v.t.Fatal(err)
	}
	v.seal(b)
}

func (h *hostileHospital) Query(ctx context.Context, q *nzcpb.QueryBatch) (*nzcpb.VoteBatch, error) {
	vb, err := h.fakeHospital.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	h.tamper(&votes{t: h.t, vb: vb, h: h})
	return vb, nil
}

// A hospital that sends votes it may not send is left out of the batch,
// with a warning that names the problem: with a quorum of every hospital
// the batch is refused (a typed quorum error) and nothing reaches the
// ledger or the outbox; with a quorum of the others the batch is answered
// and charged to them only.
func TestHostileVotes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mention string
		tamper  func(v *votes)
	}{
		{"histograms with another number of classes", "classes", func(v *votes) {
			h := v.histograms()
			nc := int(h.NumClasses)
			var counts []uint32
			for q := range int(h.NumQueries) {
				counts = append(counts, h.Counts[q*nc:(q+1)*nc]...)
				counts = append(counts, 0)
			}
			h.NumClasses, h.Counts = uint32(nc+1), counts
			v.reseal(h)
		}},
		{"more teachers than the hospital registered", "from 40 teachers", func(v *votes) {
			h := v.histograms()
			for i := range h.Counts {
				h.Counts[i] *= 2
			}
			h.NumTeachers *= 2
			v.reseal(h)
		}},
		{"a query with more votes than teachers", "sums to 21 votes", func(v *votes) {
			h := v.histograms()
			h.Counts[0]++
			v.reseal(h)
		}},
		{"histograms for fewer queries", "queries", func(v *votes) {
			h := v.histograms()
			h.NumQueries--
			h.Counts = h.Counts[:len(h.Counts)-int(h.NumClasses)]
			v.reseal(h)
		}},
		{"votes for another batch", "another batch", func(v *votes) {
			v.vb.BatchId = bytes.Repeat([]byte{9}, 16)
		}},
		{"votes in another hospital's name", "names hospital hospital-1", func(v *votes) {
			v.vb.HospitalId = "hospital-1"
		}},
		{"votes sealed to someone else", "other recipient", func(v *votes) {
			other, err := crypto.GenerateIdentity()
			if err != nil {
				v.t.Fatal(err)
			}
			if v.vb.SealedHistograms, err = crypto.Seal([]byte("votes"), other.Recipient()); err != nil {
				v.t.Fatal(err)
			}
		}},
		{"a truncated sealed payload", "malformed", func(v *votes) {
			v.vb.SealedHistograms = v.vb.SealedHistograms[:len(v.vb.SealedHistograms)-10]
		}},
		{"malformed protobuf inside the seal", "bad message", func(v *votes) {
			v.seal([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 3, 50)
			var logs syncbuf.Buffer
			cfg := f.cfg
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i, h := range f.hospitals {
				var hh Hospital = h
				if i == 2 {
					hh = &hostileHospital{fakeHospital: h, t: t, aggID: cfg.Identity, tamper: tc.tamper}
				}
				if _, err := a.AddHospital(h.id, h.teachers, h.classes, hh); err != nil {
					t.Fatal(err)
				}
			}
			a.AddStudent("student-1", f.student.Recipient())

			req, _ := f.request(t, 1, 6)
			_, err = a.Label(t.Context(), "student-1", req)
			if !errors.Is(err, protocol.ErrQuorumNotMet) {
				t.Fatalf("got %v, want a quorum refusal", err)
			}
			if got := logs.String(); !strings.Contains(got, "hospital-3") || !strings.Contains(got, tc.mention) {
				t.Fatalf("the log does not name hospital-3 and %q:\n%s", tc.mention, got)
			}
			if len(f.led.charged()) != 0 {
				t.Fatal("a batch with hostile votes was charged")
			}
			if files, _ := os.ReadDir(cfg.OutboxDir); len(files) != 0 {
				t.Fatalf("the refused batch left %d outbox files", len(files))
			}

			// Without the hostile hospital's votes the batch has its quorum:
			// it is answered and charged to the two others only.
			a.cfg.Quorum = 2
			resp := label(t, a, req)
			f.open(t, resp)
			f.wantChargedTo(t, req, "hospital-1", "hospital-2")
		})
	}
}

// A Hello does not set a hospital's ensemble size or the federation's class
// count: a hospital that announces 4,000,000,000 teachers (to decide every
// label), another number than it registered, or another class count (to
// lock the honest hospitals out) is refused, changes nothing, and the
// honest hospitals still join and are labelled by their own votes.
func TestHostileHello(t *testing.T) {
	for _, tc := range []struct {
		name              string
		id                string
		teachers, classes int
		code              error
	}{
		{"four billion teachers", "hospital-3", 4_000_000_000, classes, protocol.ErrBadRequest},
		{"one teacher more than registered", "hospital-3", 21, classes, protocol.ErrBadRequest},
		{"fewer teachers than registered", "hospital-3", 1, classes, protocol.ErrBadRequest},
		{"another class count first", "hospital-3", 20, 3, protocol.ErrBadRequest},
		{"an unregistered hospital", "hospital-9", 20, classes, protocol.ErrUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 3, 50)
			a, err := New(f.cfg)
			if err != nil {
				t.Fatal(err)
			}
			// The hostile Hello comes first.
			if _, err := a.AddHospital(tc.id, tc.teachers, tc.classes, f.hospitals[2]); !errors.Is(err, tc.code) {
				t.Fatalf("hostile hello: %v, want %v", err, tc.code)
			}
			if ok, why := a.Ready(); ok || !strings.Contains(why, "0 connected") {
				t.Fatalf("the refused hello registered a hospital: %s", why)
			}
			for _, h := range f.hospitals {
				if _, err := a.AddHospital(h.id, h.teachers, h.classes, h); err != nil {
					t.Fatalf("an honest hospital cannot join after the hostile hello: %v", err)
				}
			}
			a.AddStudent("student-1", f.student.Recipient())
			req, want := f.request(t, 1, 6)
			resp := label(t, a, req)
			got := f.open(t, resp).GetLabels()
			for q := range want {
				if got[q] != want[q] {
					t.Fatalf("labels %v, want the honest votes' %v", got, want)
				}
			}
		})
	}
}

// One hospital that cannot pay — it lowered its own cap, which is its
// right — no longer stops everyone: it is left out of the batch before any
// hospital is asked (it is neither asked nor charged, and the student is
// told), and the others go on while the quorum remains. When too few can
// pay, the batch is refused plainly and nothing is asked, drawn or charged.
func TestHospitalThatCannotPayIsLeftOut(t *testing.T) {
	f := newFixture(t, 3, 50)
	cfg := f.cfg
	cfg.Quorum = 2
	a := f.start(t, cfg)
	lowerCap := func(t *testing.T, i int, version uint64) {
		t.Helper()
		h := f.m.ByRole(crypto.RoleHospital)[i]
		key := cryptotest.SigningKey(t, f.m, h)
		// Stamped after the fixture opened the account: the ledger paces
		// a hospital's account commands by their stamps.
		at := time.Unix(1_800_000_000, 0).Add(time.Duration(version) * time.Minute).UnixNano()
		cmd, err := ledger.Sign(&ledger.ChangeCap{Hospital: h.ID, Version: version, CapEpsilon: 1e-3, CapDelta: 1e-5, Timestamp: at}, h.ID, key)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := f.led.Submit(t.Context(), cmd); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
			t.Fatalf("lower the cap of %s: %v %v", h.ID, res, err)
		}
	}
	lowerCap(t, 2, 1)

	req, want := f.request(t, 1, 6)
	resp, err := a.Label(t.Context(), "student-1", req)
	if err != nil {
		t.Fatalf("one hospital's lowered cap stopped the batch: %v", err)
	}
	got := f.open(t, resp).GetLabels()
	for q := range want {
		if got[q] != want[q] && got[q] != -1 {
			t.Fatalf("labels %v, want %v", got, want)
		}
	}
	if lo := resp.GetLeftOut(); len(lo) != 1 || lo[0] != "hospital-3" {
		t.Fatalf("the student is told %v left out, want hospital-3", lo)
	}
	f.wantChargedTo(t, req, "hospital-1", "hospital-2")
	if f.hospitals[2].calls != 0 {
		t.Fatalf("hospital-3 was asked to vote %d times on a batch it could not pay for", f.hospitals[2].calls)
	}
	// A retry says the same.
	if again, err := a.Label(t.Context(), "student-1", req); err != nil || len(again.GetLeftOut()) != 1 {
		t.Fatalf("retry: %v, %v", again, err)
	}

	// With two of three unable to pay, the quorum of two is not met.
	lowerCap(t, 1, 1)
	charges := len(f.led.charges(t))
	req2, _ := f.request(t, 2, 6)
	_, err = a.Label(t.Context(), "student-1", req2)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeBudgetExhausted || !strings.Contains(pe.Message, "1 of 3 hospitals can pay") ||
		!strings.Contains(pe.Message, "hospital-2") || !strings.Contains(pe.Message, "hospital-3") {
		t.Fatalf("got %v, want a budget refusal naming the two hospitals that cannot pay", err)
	}
	if len(f.led.charges(t)) != charges || f.hospitals[0].calls != 1 {
		t.Fatalf("the refused batch was charged or asked (hospital-1 voted %d times)", f.hospitals[0].calls)
	}
}

// served is a new aggregator on the fixture's configuration with the real
// clock, served on a loopback listener (its configuration changed by tune,
// when given) until the test ends, and its address.
func (f *fixture) served(t *testing.T, tune ...func(*quicnet.Config)) (*Aggregator, string) {
	t.Helper()
	cfg := f.cfg
	cfg.Now = time.Now
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	aggP := f.m.ByRole(crypto.RoleAggregator)[0]
	lcfg := f.netConfig(t, crypto.RoleAggregator, aggP.ID)
	for _, fn := range tune {
		fn(&lcfg)
	}
	l, err := Listen("127.0.0.1:0", lcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		l.Close()
	})
	return a, l.Addr().String()
}

// A hospital that floods the aggregator with relayed ledger commands gets
// RelayBurst of them through, then unavailable with a retry time; nothing
// more reaches the ledger, and another hospital's relays are not affected.
// (Before, 300 junk change-cap commands became 300 ledger entries in one
// second.)
func TestRelayFloodIsLimitedPerHospital(t *testing.T) {
	f := newFixture(t, 2, 50)
	_, addr := f.served(t)
	conns := map[int]*quicnet.Conn{}
	relay := func(i int, v uint64) error {
		h := f.m.ByRole(crypto.RoleHospital)[i]
		c, ok := conns[i]
		if !ok {
			var err error
			if c, err = quicnet.Dial(t.Context(), addr, f.netConfig(t, crypto.RoleHospital, h.ID), crypto.RoleAggregator); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			conns[i] = c
		}
		key := cryptotest.SigningKey(t, f.m, h)
		cmd, err := ledger.Sign(&ledger.ChangeCap{Hospital: h.ID, Version: v, CapEpsilon: 1, CapDelta: 1e-5, Timestamp: 1}, h.ID, key)
		if err != nil {
			t.Fatal(err)
		}
		return c.Invoke(t.Context(), &nzcpb.LedgerSubmit{Command: cmd}, &nzcpb.LedgerResult{})
	}
	const flood = 300
	var limited int
	for i := range flood {
		err := relay(0, uint64(1000+i))
		var pe *protocol.Error
		switch {
		case err == nil:
		case errors.As(err, &pe) && pe.Code == protocol.CodeUnavailable && pe.RetryAfter > 0:
			limited++
		default:
			t.Fatalf("relay %d: %v", i, err)
		}
	}
	// The ledger is read under its lock: the race detector sees no order
	// in a reply that came back over the network.
	f.led.mu.Lock()
	got := len(f.led.submitted)
	f.led.mu.Unlock()
	if got != DefaultRelayBurst || limited != flood-DefaultRelayBurst {
		t.Fatalf("%d of %d relayed commands reached the ledger (%d limited), want %d", got, flood, limited, DefaultRelayBurst)
	}
	if err := relay(1, 1); err != nil {
		t.Fatalf("another hospital's relay after the flood: %v", err)
	}
}

// A party registers once per connection: a second Hello on it, honest or
// not, is refused and changes nothing. (Before, every Hello re-registered
// the hospital and left a goroutine waiting for the connection's end.)
func TestOneHelloPerConnection(t *testing.T) {
	f := newFixture(t, 2, 50)
	a, addr := f.served(t)
	c, err := quicnet.Dial(t.Context(), addr, f.netConfig(t, crypto.RoleHospital, "hospital-1"), crypto.RoleAggregator)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hello := &nzcpb.Hello{ProtocolVersion: protocol.ProtocolVersion, Role: nzcpb.Role_ROLE_HOSPITAL, PartyId: "hospital-1",
		AgeRecipient: f.hospRecip[0].String(), Hospital: &nzcpb.HospitalInfo{NumTeachers: 20, NumClasses: classes}}
	if err := c.Invoke(t.Context(), hello, &nzcpb.Ack{}); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	first := a.hospitals["hospital-1"]
	a.mu.Unlock()
	for range 3 {
		if err := c.Invoke(t.Context(), hello, &nzcpb.Ack{}); !errors.Is(err, protocol.ErrBadRequest) {
			t.Fatalf("a second Hello on one connection: %v, want bad-request", err)
		}
	}
	a.mu.Lock()
	again := a.hospitals["hospital-1"]
	a.mu.Unlock()
	if again != first || again.gen != 0 {
		t.Fatal("a refused second Hello replaced the hospital's registration")
	}
}

// Batch ids are each student's own: another student that sends a batch id
// already used is labelled on its own account, neither refused (which told
// it that the id, say the hash of a public data set, had been labelled)
// nor given the first student's batch; and each student's retry still
// finds its own answers. Before, the second student got "belongs to
// another student", and the ledger refused its charge as a conflict.
func TestBatchIDsAreEachStudentsOwn(t *testing.T) {
	f := newFixture(t, 2, 50)
	a := f.start(t, f.cfg)
	st2 := f.m.ByRole(crypto.RoleStudent)[1]
	id2 := cryptotest.Identity(t, f.m, st2)
	a.AddStudent(st2.ID, id2.Recipient())
	req, _ := f.request(t, 5, 6)
	first := label(t, a, req)
	second, err := a.Label(t.Context(), st2.ID, req)
	if err != nil {
		t.Fatalf("another student's batch of the same id: %v", err)
	}
	if second.GetReplayed() || second.GetLedgerIndex() == first.GetLedgerIndex() {
		t.Fatalf("the second student got the first one's batch (entry %d, replayed %v)", second.GetLedgerIndex(), second.GetReplayed())
	}
	if _, err := crypto.Open(second.GetSealedLabels(), id2); err != nil {
		t.Fatalf("the second student's labels are not sealed to it: %v", err)
	}
	again, err := a.Label(t.Context(), "student-1", req)
	if err != nil || !again.GetReplayed() || again.GetLedgerIndex() != first.GetLedgerIndex() {
		t.Fatalf("the first student's retry: %v %v", again, err)
	}
}

// Committed batches leave the outbox once the retention period is over;
// pending ones stay (their charge may still commit). Before, the outbox
// grew without end.
func TestOutboxIsPruned(t *testing.T) {
	f := newFixture(t, 2, 50)
	now := time.Unix(1_800_000_000, 0)
	cfg := f.cfg
	cfg.Now = func() time.Time { return now }
	cfg.Retention = time.Hour
	a := f.start(t, cfg)
	req, _ := f.request(t, 1, 4)
	label(t, a, req)
	f.led.down = true
	pending, _ := f.request(t, 2, 4)
	if _, err := a.Label(t.Context(), "student-1", pending); !errors.Is(err, protocol.ErrLedgerUnavailable) {
		t.Fatalf("with the ledger down: %v", err)
	}
	count := func() int {
		t.Helper()
		all, err := a.outbox.records()
		if err != nil {
			t.Fatal(err)
		}
		return len(all)
	}
	now = now.Add(59 * time.Minute)
	if err := a.Prune(); err != nil || count() != 2 {
		t.Fatalf("within the retention: %v, %d records, want 2", err, count())
	}
	now = now.Add(2 * time.Minute)
	if err := a.Prune(); err != nil || count() != 1 {
		t.Fatalf("after the retention: %v, %d records, want the pending one", err, count())
	}
	if p, _ := a.outbox.Pending(); len(p) != 1 || p[0].BatchID != batchHex(pending) {
		t.Fatalf("pending after pruning: %+v", p)
	}
}

// A record written under the old name (the batch id alone) is found by
// its own student, and moved to its per-student name, and not by another.
func TestLegacyOutboxRecord(t *testing.T) {
	o, err := OpenOutbox(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(o.legacyPath("00aa"), []byte(`{"version":1,"batch_id":"00aa","student":"student-1","state":"committed","ledger_index":3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := o.Get("student-2", "00aa"); ok || err != nil {
		t.Fatalf("another student found the record: %v %v", ok, err)
	}
	r, ok, err := o.Get("student-1", "00aa")
	if err != nil || !ok || r.LedgerIndex != 3 {
		t.Fatalf("its student: %+v %v %v", r, ok, err)
	}
	if _, err := os.Stat(o.legacyPath("00aa")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old record was not moved: %v", err)
	}
	if _, err := os.Stat(o.path("student-1", "00aa")); err != nil {
		t.Fatal(err)
	}
}

// quotaLedger reports the student's quota as the ledger would.
type quotaLedger struct {
	*fakeLedger
	quota *nzcpb.StudentQuota
}

func (l quotaLedger) Budget(ctx context.Context, req *nzcpb.BudgetRequest) (*nzcpb.BudgetResponse, error) {
	resp, err := l.fakeLedger.Budget(ctx, req)
	if err == nil && req.GetStudentId() != "" {
		resp.Student = l.quota
	}
	return resp, err
}

// A batch that would pass the student's answer quota at its worst case is
// refused before any hospital runs inference on it (before, the hospitals
// voted and the ledger refused the charge afterwards), and so is a batch of
// a student the ledger does not know. A student's budget read through the
// aggregator cannot ask for another student's quota.
func TestStudentQuotaCheckedBeforeFanOut(t *testing.T) {
	f := newFixture(t, 2, 50)
	cfg := f.cfg
	ql := quotaLedger{fakeLedger: f.led, quota: &nzcpb.StudentQuota{StudentId: "student-1", Registered: true, MaxAnswers: 10, Answers: 6}}
	cfg.Ledger = ql
	a := f.start(t, cfg)
	calls := func() int { return f.hospitals[0].calls + f.hospitals[1].calls }

	req, _ := f.request(t, 1, 6)
	_, err := a.Label(t.Context(), "student-1", req)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeBudgetExhausted || !strings.Contains(pe.Message, "6 of its 10 answers") || calls() != 0 {
		t.Fatalf("a batch over the quota: %v (hospitals asked %d times), want refused before fan-out", err, calls())
	}
	small, _ := f.request(t, 2, 4)
	if _, err := a.Label(t.Context(), "student-1", small); err != nil {
		t.Fatalf("a batch within the quota: %v", err)
	}
	ql.quota.Registered = false
	other, _ := f.request(t, 3, 1)
	if _, err := a.Label(t.Context(), "student-1", other); !errors.Is(err, protocol.ErrBadRequest) {
		t.Fatalf("an unregistered student: %v", err)
	}

	resp, err := a.Budget(t.Context(), &nzcpb.BudgetRequest{StudentId: "student-2"})
	if err != nil || resp.GetStudent() != nil {
		t.Fatalf("a budget read naming a student got %v, %v; want no quota", resp.GetStudent(), err)
	}
}
