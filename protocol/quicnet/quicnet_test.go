package quicnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

var testBatch = bytes.Repeat([]byte{0x42}, 16)

// connectPair dials the listener as party and returns both ends.
func connectPair(t *testing.T, l *Listener, cfg Config, want crypto.Role) (client, server *Conn) {
	t.Helper()
	ctx := testContext(t)
	accepted := acceptAll(ctx, l)
	c, err := Dial(ctx, l.Addr().String(), cfg, want)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, recv(t, accepted, "accepted connection")
}

// aggregatorToAuditor connects the aggregator to an auditor and returns
// the aggregator's end (client) and the auditor's (server).
func aggregatorToAuditor(t *testing.T) (client, server *Conn) {
	t.Helper()
	f := newFederation(t)
	return connectPair(t, listen(t, f.config(t, "auditor-1")), f.config(t, "aggregator"), crypto.RoleAuditor)
}

// serve runs c.Serve until the test ends.
func serve(t *testing.T, c *Conn, mux Mux) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Serve(ctx, mux)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func TestCallBothDirections(t *testing.T) {
	f := newFederation(t)
	ctx := testContext(t)
	l := listen(t, f.config(t, "aggregator"), crypto.RoleHospital, crypto.RoleStudent)
	hospital, agg := connectPair(t, l, f.config(t, "hospital-1"), crypto.RoleAggregator)
	if got := hospital.Peer(); got != (crypto.Peer{Role: crypto.RoleAggregator, ID: "aggregator"}) {
		t.Fatalf("hospital sees peer %v", got)
	}
	if got := agg.Peer(); got != (crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-1"}) {
		t.Fatalf("aggregator sees peer %v", got)
	}
	// The aggregator answers Hello; the hospital, which only dialled,
	// answers QueryBatch over the same connection.
	serve(t, agg, Mux{protocol.TypeHello: {Roles: []crypto.Role{crypto.RoleHospital}, Handle: func(ctx context.Context, req *Request) (protocol.MsgType, []byte, error) {
		var h nzcpb.Hello
		if err := req.Decode(&h); err != nil {
			return 0, nil, err
		}
		if h.GetPartyId() != req.Peer.ID {
			return 0, nil, protocol.Errorf(protocol.CodeUnauthorized, "hello names %q but the certificate %s", h.GetPartyId(), req.Peer)
		}
		return Reply(&nzcpb.Ack{ProtocolVersion: protocol.ProtocolVersion, PartyId: "aggregator", Message: "registered"})
	}}})
	serve(t, hospital, Mux{protocol.TypeQueryBatch: {Roles: []crypto.Role{crypto.RoleAggregator}, Handle: func(ctx context.Context, req *Request) (protocol.MsgType, []byte, error) {
		var q nzcpb.QueryBatch
		if err := req.Decode(&q); err != nil {
			return 0, nil, err
		}
		return Reply(&nzcpb.VoteBatch{BatchId: q.GetBatchId(), HospitalId: "hospital-1", NumQueries: q.GetNumQueries(),
			NumClasses: q.GetNumClasses(), SealedHistograms: []byte("sealed")})
	}}})

	var ack nzcpb.Ack
	hello := &nzcpb.Hello{ProtocolVersion: 1, Role: nzcpb.Role_ROLE_HOSPITAL, PartyId: "hospital-1",
		AgeRecipient: "age1example", Hospital: &nzcpb.HospitalInfo{NumTeachers: 5, NumClasses: 10}}
	if err := hospital.Invoke(ctx, hello, &ack); err != nil {
		t.Fatal(err)
	}
	if ack.GetMessage() != "registered" {
		t.Fatalf("ack = %v", &ack)
	}
	// A Hello that lies about the id is refused with a typed error.
	hello.PartyId = "hospital-9"
	if err := hospital.Invoke(ctx, hello, &ack); !errors.Is(err, protocol.ErrUnauthorized) {
		t.Fatalf("lying hello: err = %v", err)
	}
	var votes nzcpb.VoteBatch
	q := &nzcpb.QueryBatch{BatchId: testBatch, NumQueries: 3, FeatureDim: 4, NumClasses: 10,
		SealedFeatures: []byte("sealed"), HospitalIds: []string{"hospital-1"}, DeadlineUnixMs: 1}
	if err := agg.Invoke(ctx, q, &votes); err != nil {
		t.Fatal(err)
	}
	if votes.GetHospitalId() != "hospital-1" || votes.GetNumQueries() != 3 {
		t.Fatalf("votes = %v", &votes)
	}
	// A malformed request body is answered bad-request.
	if _, _, err := agg.Call(ctx, protocol.TypeQueryBatch, []byte{0xff, 0xff}); !errors.Is(err, protocol.ErrBadRequest) {
		t.Fatalf("malformed body: err = %v", err)
	}
}

func echoMux(roles ...crypto.Role) Mux {
	return Mux{protocol.TypeLedgerSubmit: {Roles: roles, Handle: func(ctx context.Context, req *Request) (protocol.MsgType, []byte, error) {
		return protocol.TypeLedgerResult, bytes.Clone(req.Body), nil
	}}}
}

func TestConcurrentCalls(t *testing.T) {
	ctx := testContext(t)
	client, server := aggregatorToAuditor(t)
	serve(t, server, echoMux(crypto.RoleAggregator))
	serve(t, client, echoMux(crypto.RoleAuditor))
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 100 {
		for _, c := range []*Conn{client, server} {
			wg.Go(func() {
				body := []byte(fmt.Sprintf("request %d from %s", i, c.LocalAddr()))
				rt, got, err := c.Call(ctx, protocol.TypeLedgerSubmit, body)
				if err == nil && (rt != protocol.TypeLedgerResult || !bytes.Equal(got, body)) {
					err = fmt.Errorf("call %d: got %v %q", i, rt, got)
				}
				if err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestOversizedFrame(t *testing.T) {
	f := newFederation(t)
	ctx := testContext(t)
	scfg := f.config(t, "auditor-1")
	scfg.MaxBody = 1024
	l := listen(t, scfg)
	ccfg := f.config(t, "aggregator")
	ccfg.MaxBody = 1 << 20
	client, server := connectPair(t, l, ccfg, crypto.RoleAuditor)
	var ran atomic.Int32
	mux := echoMux(crypto.RoleAggregator)
	inner := mux[protocol.TypeLedgerSubmit].Handle
	mux[protocol.TypeLedgerSubmit] = Route{Roles: []crypto.Role{crypto.RoleAggregator}, Handle: func(ctx context.Context, req *Request) (protocol.MsgType, []byte, error) {
		ran.Add(1)
		return inner(ctx, req)
	}}
	serve(t, server, mux)
	_, _, err := client.Call(ctx, protocol.TypeLedgerSubmit, make([]byte, 64<<10))
	var pe *protocol.Error
	if !errors.Is(err, protocol.ErrFrameTooLarge) || !errors.As(err, &pe) || pe.Code != protocol.CodeTooLarge {
		t.Fatalf("oversized request: err = %v", err)
	}
	if ran.Load() != 0 {
		t.Fatal("handler ran for an oversized request")
	}
	// Within the limit it works, on the same connection.
	if _, _, err := client.Call(ctx, protocol.TypeLedgerSubmit, make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	// The caller's own limit is checked before anything is sent.
	_, _, err = server.Call(ctx, protocol.TypeLedgerSubmit, make([]byte, 2048))
	var fe *protocol.FrameTooLargeError
	if !errors.As(err, &fe) || fe.Max != 1024 {
		t.Fatalf("local limit: err = %v", err)
	}
}

func TestRoleEnforcement(t *testing.T) {
	f := newFederation(t)
	ctx := testContext(t)
	l := listen(t, f.config(t, "aggregator"))
	student, agg := connectPair(t, l, f.config(t, "student-1"), crypto.RoleAggregator)
	var ran atomic.Int32
	serve(t, agg, Mux{
		protocol.TypeLedgerSubmit: {Roles: []crypto.Role{crypto.RoleAuditor}, Handle: func(context.Context, *Request) (protocol.MsgType, []byte, error) {
			ran.Add(1)
			return protocol.TypeLedgerResult, nil, nil
		}},
		protocol.TypeBudgetRequest: {Handle: func(context.Context, *Request) (protocol.MsgType, []byte, error) {
			ran.Add(1)
			return protocol.TypeBudgetResponse, nil, nil
		}},
		protocol.TypeLabelRequest: {Roles: []crypto.Role{crypto.RoleStudent}, Handle: func(context.Context, *Request) (protocol.MsgType, []byte, error) {
			return protocol.TypeLabelResponse, []byte("ok"), nil
		}},
	})
	tests := []struct {
		typ  protocol.MsgType
		want error
		text string
	}{
		{protocol.TypeLedgerSubmit, protocol.ErrUnauthorized, "only auditor"},
		{protocol.TypeBudgetRequest, protocol.ErrUnauthorized, "no role"},
		{protocol.TypeVoteBatch, protocol.ErrUnknownType, "does not serve VoteBatch"},
	}
	for _, tc := range tests {
		_, _, err := student.Call(ctx, tc.typ, []byte("x"))
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%v: err = %v, want %v mentioning %q", tc.typ, err, tc.want, tc.text)
		}
	}
	if ran.Load() != 0 {
		t.Fatal("a handler ran for a caller whose role it does not allow")
	}
	if _, body, err := student.Call(ctx, protocol.TypeLabelRequest, []byte("x")); err != nil || string(body) != "ok" {
		t.Fatalf("allowed call: %q %v", body, err)
	}
}

func TestCallContextCancel(t *testing.T) {
	ctx := testContext(t)
	client, server := aggregatorToAuditor(t)
	started, stopped := make(chan struct{}), make(chan error, 1)
	serve(t, server, Mux{protocol.TypeLedgerSubmit: {Roles: []crypto.Role{crypto.RoleAggregator}, Handle: func(hctx context.Context, _ *Request) (protocol.MsgType, []byte, error) {
		close(started)
		select {
		case <-hctx.Done():
			stopped <- hctx.Err()
		case <-ctx.Done():
			stopped <- errors.New("handler was not cancelled")
		}
		return 0, nil, hctx.Err()
	}}})
	cctx, cancel := context.WithCancel(ctx)
	result := make(chan error, 1)
	go func() {
		_, _, err := client.Call(cctx, protocol.TypeLedgerSubmit, []byte("slow"))
		result <- err
	}()
	recv(t, started, "handler start")
	cancel()
	if err := recv(t, result, "Call to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Call err = %v, want context.Canceled", err)
	}
	if err := recv(t, stopped, "handler cancellation"); !errors.Is(err, context.Canceled) {
		t.Fatalf("handler: %v", err)
	}
	// The connection survives an abandoned call.
	if client.Err() != nil {
		t.Fatalf("connection closed: %v", client.Err())
	}
}

func TestHandlerPanic(t *testing.T) {
	ctx := testContext(t)
	client, server := aggregatorToAuditor(t)
	serve(t, server, Mux{protocol.TypeLedgerSubmit: {Roles: []crypto.Role{crypto.RoleAggregator}, Handle: func(context.Context, *Request) (protocol.MsgType, []byte, error) {
		panic("bug")
	}}})
	_, _, err := client.Call(ctx, protocol.TypeLedgerSubmit, []byte("x"))
	if !errors.Is(err, protocol.ErrInternal) || strings.Contains(err.Error(), "bug") {
		t.Fatalf("err = %v, want internal without details", err)
	}
	if _, _, err := client.Call(ctx, protocol.TypeLedgerSubmit, []byte("x")); !errors.Is(err, protocol.ErrInternal) {
		t.Fatalf("server did not survive the panic: %v", err)
	}
}

func TestClosedConnection(t *testing.T) {
	ctx := testContext(t)
	client, server := aggregatorToAuditor(t)
	serveErr := make(chan error, 1)
	go func() { serveErr <- client.Serve(ctx, echoMux(crypto.RoleAuditor)) }()
	server.Close()
	recv(t, client.Done(), "connection close")
	if err := recv(t, serveErr, "Serve to return"); err == nil {
		t.Fatal("Serve returned nil after the peer closed")
	}
	if _, _, err := client.Call(ctx, protocol.TypeLedgerSubmit, []byte("x")); err == nil {
		t.Fatal("Call on a closed connection succeeded")
	}
}

// TestSilentRequestTimesOut: a stream opened and left half-sent is
// answered bad-request after ReadTimeout instead of holding the server.
func TestSilentRequestTimesOut(t *testing.T) {
	f := newFederation(t)
	ctx := testContext(t)
	scfg := f.config(t, "auditor-1")
	scfg.ReadTimeout = 100 * time.Millisecond
	l := listen(t, scfg)
	client, server := connectPair(t, l, f.config(t, "aggregator"), crypto.RoleAuditor)
	serve(t, server, echoMux(crypto.RoleAggregator))
	s, err := client.qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.CancelRead(0)
	if _, err := s.Write([]byte{byte(protocol.TypeLedgerSubmit), 10, 1, 2}); err != nil { // 2 of 10 bytes
		t.Fatal(err)
	}
	_ = s.SetReadDeadline(time.Now().Add(testTimeout))
	rt, body, err := protocol.NewFrameReader(s, 0).Next()
	if err != nil || rt != protocol.TypeError {
		t.Fatalf("answer %v %v", rt, err)
	}
	var e nzcpb.Error
	if err := protocol.DecodeInto(rt, body, &e); err != nil {
		t.Fatal(err)
	}
	if got := protocol.FromWire(&e); !errors.Is(got, protocol.ErrBadRequest) || !strings.Contains(got.Error(), "did not arrive") {
		t.Fatalf("answer %v", got)
	}
}
