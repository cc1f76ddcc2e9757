package intake

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/teacher"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// directFixture is one auditor's intake on loopback over a ledger of a
// provisioned federation whose two hospitals have open accounts.
type directFixture struct {
	m    *crypto.Manifest
	st   *ledger.State
	node *applyingNode
	addr string
	h1   crypto.PartyFiles
	h2   crypto.PartyFiles
}

func newDirectFixture(t *testing.T, srv *Server) *directFixture {
	t.Helper()
	m, cmds := provisionedGenesis(t, "nzc.test/ledger", time.Unix(1_800_000_000, 0))
	hs := m.ByRole(crypto.RoleHospital)
	f := &directFixture{m: m, st: ledger.New(), h1: hs[0], h2: hs[1]}
	if srv.Now == nil {
		// The fixture's account commands are stamped a few nanoseconds
		// into 1970: the intake's clock reads the same.
		srv.Now = func() time.Time { return time.Unix(0, 3) }
	}
	for _, h := range hs {
		cmds = append(cmds, f.sign(t, &ledger.OpenAccount{Hospital: h.ID, CapEpsilon: 8, CapDelta: 1e-5, Timestamp: 2}, h))
	}
	for _, c := range cmds {
		if r, err := f.st.Apply(c); err != nil || r.Status != ledger.StatusAccepted {
			t.Fatalf("setup: %v %v", r, err)
		}
	}
	f.node = &applyingNode{st: f.st}
	srv.Node, srv.Ledger = f.node, stateLedger{f.st}
	l, err := Listen("127.0.0.1:0", f.net(t, m.ByRole(crypto.RoleAuditor)[0]))
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	serve(t, func(ctx context.Context) error { return srv.Serve(ctx, l) })
	return f
}

// serve runs fn until the test ends and waits for it to return.
func serve(t *testing.T, fn func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = fn(ctx)
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func (f *directFixture) net(t *testing.T, p crypto.PartyFiles) quicnet.Config {
	t.Helper()
	cfg, err := quicnet.LoadConfig(f.m.Path(f.m.CACert), f.m.Path(p.Cert), f.m.Path(p.Key))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (f *directFixture) key(t *testing.T, p crypto.PartyFiles) []byte {
	t.Helper()
	k, err := crypto.LoadPrivateKey(f.m.Path(p.SigningKey))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sign signs b as party p.
func (f *directFixture) sign(t *testing.T, b ledger.Body, p crypto.PartyFiles) []byte {
	t.Helper()
	cmd, err := ledger.Sign(b, p.ID, f.key(t, p))
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

func (f *directFixture) capOf(t *testing.T, h string) ledger.Account {
	t.Helper()
	for _, a := range f.st.Accounts() {
		if a.Hospital == h {
			return a
		}
	}
	t.Fatalf("no account of %s", h)
	return ledger.Account{}
}

// dial connects to the intake with p's certificate.
func (f *directFixture) dial(t *testing.T, p crypto.PartyFiles) *quicnet.Conn {
	t.Helper()
	c, err := quicnet.Dial(t.Context(), f.addr, f.net(t, p), crypto.RoleAuditor)
	if err != nil {
		t.Fatalf("%s dials the intake: %v", p.ID, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// An aggregator that drops every change-cap it is asked to relay cannot
// keep a hospital's cap where it is: the hospital signs the change and
// submits it to the auditors itself (nzc-teacher cap), and the ledger
// records it. (Before, the intake admitted only the aggregator's
// certificate, and a hospital had no other way to its account.)
func TestDroppingAggregatorCannotKeepAHospitalsCap(t *testing.T) {
	f := newDirectFixture(t, &Server{Now: time.Now}) // teacher.SetCap stamps with time.Now

	// The aggregator, hostile: it answers every relayed change-cap with an
	// error and proposes nothing.
	agg := f.m.ByRole(crypto.RoleAggregator)[0]
	al, err := quicnet.Listen("127.0.0.1:0", f.net(t, agg), crypto.RoleHospital)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, func(ctx context.Context) error {
		return al.Serve(ctx, quicnet.Mux{protocol.TypeLedgerSubmit: {Roles: []crypto.Role{crypto.RoleHospital},
			Handle: func(context.Context, *quicnet.Request) (protocol.MsgType, []byte, error) {
				return 0, nil, protocol.Errorf(protocol.CodeLedgerUnavailable, "the ledger did not answer")
			}}}, nil)
	})
	ac, err := quicnet.Dial(t.Context(), al.Addr().String(), f.net(t, f.h1), crypto.RoleAggregator)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	lower := f.sign(t, &ledger.ChangeCap{Hospital: f.h1.ID, Version: 1, CapEpsilon: 2, CapDelta: 1e-6, Timestamp: 3}, f.h1)
	var res nzcpb.LedgerResult
	if err := ac.Invoke(t.Context(), &nzcpb.LedgerSubmit{Command: lower}, &res); err == nil {
		t.Fatalf("the dropping aggregator relayed the change: %v", &res)
	}
	if a := f.capOf(t, f.h1.ID); a.CapEpsilon != 8 || a.CapVersion != 0 {
		t.Fatalf("cap after the dropped relay: %+v", a)
	}

	lc, err := NewClient(f.net(t, f.h1), []string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	got, err := teacher.SetCap(t.Context(), lc, teacher.CapRequest{Hospital: f.h1.ID, Key: f.key(t, f.h1), Epsilon: 2, Delta: 1e-6})
	if err != nil {
		t.Fatalf("the hospital's direct cap change: %v", err)
	}
	if got.Command != "change-cap" || got.Version != 1 || got.Code != "committed" {
		t.Fatalf("result %+v", got)
	}
	if a := f.capOf(t, f.h1.ID); a.CapEpsilon != 2 || a.CapDelta != 1e-6 || a.CapVersion != 1 {
		t.Fatalf("cap after the direct change: %+v", a)
	}
	// A second change signs the next version by itself.
	if got, err := teacher.SetCap(t.Context(), lc, teacher.CapRequest{Hospital: f.h1.ID, Key: f.key(t, f.h1), Epsilon: 1, Delta: 1e-6}); err != nil || got.Version != 2 {
		t.Fatalf("second change: %+v %v", got, err)
	}
	if a := f.capOf(t, f.h2.ID); a.CapEpsilon != 8 || a.CapVersion != 0 {
		t.Fatalf("the other hospital's account changed: %+v", a)
	}
}

// Over its own connection a hospital may submit only its own open-account
// and change-cap, signed by itself, and read only its own budget: anything
// else — another hospital's change (signed by either), its own change
// signed by another, a charge, a registration, bytes that are no command —
// is refused with a clear code and nothing is proposed. Its own change is
// then proposed and recorded.
func TestHospitalSubmitsOnlyItsOwnAccountCommands(t *testing.T) {
	f := newDirectFixture(t, &Server{HospitalBurst: 100})
	c := f.dial(t, f.h1)
	h1, h2 := f.h1, f.h2
	agg := f.m.ByRole(crypto.RoleAggregator)[0]
	size := f.st.TreeSize()
	for _, tc := range []struct {
		name string
		cmd  []byte
		code protocol.Code
	}{
		{"another hospital's change signed by it", f.sign(t, &ledger.ChangeCap{Hospital: h2.ID, Version: 1, CapEpsilon: 1, CapDelta: 1e-5, Timestamp: 3}, h2), protocol.CodeUnauthorized},
		{"another hospital's change signed by this one", f.sign(t, &ledger.ChangeCap{Hospital: h2.ID, Version: 1, CapEpsilon: 1, CapDelta: 1e-5, Timestamp: 3}, h1), protocol.CodeUnauthorized},
		{"its own change signed by another", f.sign(t, &ledger.ChangeCap{Hospital: h1.ID, Version: 1, CapEpsilon: 1, CapDelta: 1e-5, Timestamp: 3}, h2), protocol.CodeUnauthorized},
		{"another hospital's opening", f.sign(t, &ledger.OpenAccount{Hospital: h2.ID, CapEpsilon: 1, CapDelta: 1e-5, Timestamp: 3}, h2), protocol.CodeUnauthorized},
		{"a charge signed by the hospital", f.sign(t, &ledger.Charge{BatchID: "b1", Student: "student-1", Hospitals: []string{h1.ID}, Mechanism: "gnmax", Queries: 1, Answers: 1, Timestamp: 3}, h1), protocol.CodeUnauthorized},
		{"a charge signed by the aggregator", f.sign(t, &ledger.Charge{BatchID: "b1", Student: "student-1", Hospitals: []string{h1.ID}, Mechanism: "gnmax", Queries: 1, Answers: 1, Timestamp: 3}, agg), protocol.CodeUnauthorized},
		{"a registration", f.sign(t, &ledger.RegisterStudent{Student: "s9", Timestamp: 3}, h1), protocol.CodeUnauthorized},
		{"no command", []byte{0x4e, 0x5a, 0x01}, protocol.CodeBadRequest},
	} {
		var res nzcpb.LedgerResult
		err := c.Invoke(t.Context(), &nzcpb.LedgerSubmit{Command: tc.cmd}, &res)
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != tc.code {
			t.Errorf("%s: %v %v, want %v", tc.name, &res, err, tc.code)
		}
	}
	var b nzcpb.BudgetResponse
	for _, req := range []*nzcpb.BudgetRequest{{HospitalIds: []string{h2.ID}}, {HospitalIds: []string{h1.ID, h2.ID}}, {StudentId: "student-1"}} {
		var pe *protocol.Error
		if err := c.Invoke(t.Context(), req, &b); !errors.As(err, &pe) || pe.Code != protocol.CodeUnauthorized {
			t.Errorf("budget read %v by %s: %v, want unauthorized", req, h1.ID, err)
		}
	}
	if n := f.node.count(); n != 0 || f.st.TreeSize() != size {
		t.Fatalf("%d refused commands proposed; the log grew from %d to %d", n, size, f.st.TreeSize())
	}
	// A stale version of its own change is refused unproposed too.
	var res nzcpb.LedgerResult
	stale := f.sign(t, &ledger.ChangeCap{Hospital: h1.ID, Version: 5, CapEpsilon: 1, CapDelta: 1e-5, Timestamp: 3}, h1)
	if err := c.Invoke(t.Context(), &nzcpb.LedgerSubmit{Command: stale}, &res); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED || f.node.count() != 0 {
		t.Fatalf("a stale change: %v %v (proposed %d)", &res, err, f.node.count())
	}
	if err := c.Invoke(t.Context(), &nzcpb.BudgetRequest{}, &b); err != nil || len(b.GetBudgets()) != 1 || b.GetBudgets()[0].GetHospitalId() != h1.ID {
		t.Fatalf("its own budget: %v %v", &b, err)
	}
	own := f.sign(t, &ledger.ChangeCap{Hospital: h1.ID, Version: 1, CapEpsilon: 1, CapDelta: 1e-5, Timestamp: 3}, h1)
	if err := c.Invoke(t.Context(), &nzcpb.LedgerSubmit{Command: own}, &res); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED || f.node.count() != 1 {
		t.Fatalf("its own change: %v %v (proposed %d)", &res, err, f.node.count())
	}
}

// A student's certificate does not open a connection to the intake, and a
// hospital that floods it is limited: past its burst nothing more of it is
// proposed until its bucket refills, and another hospital is not held up.
func TestIntakeRefusesStudentsAndLimitsHospitals(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := newDirectFixture(t, &Server{HospitalBurst: 3, HospitalEvery: time.Minute, Now: func() time.Time { return now }})
	student := f.m.ByRole(crypto.RoleStudent)[0]
	if c, err := quicnet.Dial(t.Context(), f.addr, f.net(t, student), crypto.RoleAuditor); err == nil {
		_ = c.Close()
		t.Fatal("a student connected to the intake")
	}
	c := f.dial(t, f.h1)
	limited := 0
	for v := range 10 {
		cmd := f.sign(t, &ledger.ChangeCap{Hospital: f.h1.ID, Version: uint64(v + 1), CapEpsilon: 4, CapDelta: 1e-5, Timestamp: now.UnixNano() + int64(v)}, f.h1)
		var res nzcpb.LedgerResult
		err := c.Invoke(t.Context(), &nzcpb.LedgerSubmit{Command: cmd}, &res)
		var pe *protocol.Error
		switch {
		case errors.As(err, &pe) && pe.Code == protocol.CodeUnavailable && pe.RetryAfter > 0:
			limited++
		case err != nil:
			t.Fatalf("change %d: %v", v, err)
		}
	}
	if limited != 7 || f.node.count() != 3 {
		t.Fatalf("%d of 10 limited, %d proposed; want 7 and 3", limited, f.node.count())
	}
	c2 := f.dial(t, f.h2)
	var res nzcpb.LedgerResult
	cmd := f.sign(t, &ledger.ChangeCap{Hospital: f.h2.ID, Version: 1, CapEpsilon: 4, CapDelta: 1e-5, Timestamp: now.UnixNano()}, f.h2)
	if err := c2.Invoke(t.Context(), &nzcpb.LedgerSubmit{Command: cmd}, &res); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
		t.Fatalf("the other hospital after the flood: %v %v", &res, err)
	}
}
