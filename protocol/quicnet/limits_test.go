package quicnet

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// One party cannot open connections without end: past MaxConnsPerPeer the
// listener refuses the next with a reason, while the open ones keep
// working and another party still gets in. (Before, every connection was
// accepted.)
func TestConnectionsPerPeerAreLimited(t *testing.T) {
	f := newFederation(t)
	ctx := testContext(t)
	srv := f.config(t, "aggregator")
	srv.MaxConnsPerPeer = 2
	rej := newRejections()
	srv.OnReject = rej.record
	l := listen(t, srv, crypto.RoleHospital, crypto.RoleStudent)
	mux := Mux{protocol.TypeHello: {Roles: []crypto.Role{crypto.RoleHospital, crypto.RoleStudent}, Handle: func(context.Context, *Request) (protocol.MsgType, []byte, error) {
		return Reply(&nzcpb.Ack{ProtocolVersion: 1, PartyId: "aggregator", AgeRecipient: "age1x"})
	}}}
	go l.Serve(ctx, mux, nil)

	var open []*Conn
	for range 2 {
		c, err := Dial(ctx, l.Addr().String(), f.config(t, "hospital-1"), crypto.RoleAggregator)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		open = append(open, c)
	}
	if _, err := Dial(ctx, l.Addr().String(), f.config(t, "hospital-1"), crypto.RoleAggregator); err == nil {
		t.Fatal("a third connection of the same party was accepted")
	}
	var tm *TooManyConnsError
	if err := recv(t, rej.ch, "the refusal"); !errors.As(err, &tm) || tm.Max != 2 {
		t.Fatalf("refused with %v, want too many connections", err)
	}
	hello := &nzcpb.Hello{ProtocolVersion: 1, Role: nzcpb.Role_ROLE_HOSPITAL, PartyId: "hospital-1", AgeRecipient: "age1x"}
	for _, c := range open {
		if err := c.Invoke(ctx, hello, &nzcpb.Ack{}); err != nil {
			t.Fatalf("an open connection stopped working: %v", err)
		}
	}
	other, err := Dial(ctx, l.Addr().String(), f.config(t, "student-1"), crypto.RoleAggregator)
	if err != nil {
		t.Fatalf("another party was refused: %v", err)
	}
	other.Close()
	// Closing one lets the party connect again.
	open[0].Close()
	if err := waitFor(ctx, func() bool {
		c, err := Dial(ctx, l.Addr().String(), f.config(t, "hospital-1"), crypto.RoleAggregator)
		if err == nil {
			c.Close()
		}
		return err == nil
	}); err != nil {
		t.Fatal("the party could not reconnect after closing a connection")
	}
}

// A peer cannot hold more than MaxStreams requests open at once on one
// connection: the next waits for a stream (here until its context ends)
// instead of adding a goroutine and a buffer on the server.
func TestStreamsPerConnectionAreLimited(t *testing.T) {
	ctx := testContext(t)
	client, started, release := blockedPair(t, func(c *Config) { c.MaxStreams = 2 }, protocol.TypeBudgetRequest, &nzcpb.BudgetResponse{})
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- client.Invoke(ctx, &nzcpb.BudgetRequest{}, &nzcpb.BudgetResponse{}) }()
	}
	recv(t, started, "the first request")
	recv(t, started, "the second request")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := client.Invoke(short, &nzcpb.BudgetRequest{}, &nzcpb.BudgetResponse{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third concurrent request: %v, want it held until its deadline", err)
	}
	select {
	case <-started:
		t.Fatal("the server ran a third concurrent request")
	default:
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor retries cond until it holds or ctx ends; each try does real work
// (a dial), so the loop does not spin.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// A request a peer may not send is refused from its header: a hospital
// that announces a 16 MiB label request (only students may send one) gets
// unauthorized at once, without sending the body, and the server reads none
// of it. (Before, the body was read whole, up to 16 MiB per stream, before
// the role was checked.)
func TestForbiddenRequestRefusedBeforeItsBody(t *testing.T) {
	f := newFederation(t)
	ctx := testContext(t)
	client, server := connectPair(t, listen(t, f.config(t, "aggregator"), crypto.RoleHospital), f.config(t, "hospital-1"), crypto.RoleAggregator)
	ran := make(chan struct{}, 1)
	serve(t, server, Mux{protocol.TypeLabelRequest: {Roles: []crypto.Role{crypto.RoleStudent}, Handle: func(context.Context, *Request) (protocol.MsgType, []byte, error) {
		ran <- struct{}{}
		return 0, nil, nil
	}}})
	s, err := client.qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hdr := binary.AppendUvarint(binary.AppendUvarint(nil, uint64(protocol.TypeLabelRequest)), protocol.DefaultMaxBody)
	if _, err := s.Write(hdr); err != nil {
		t.Fatal(err)
	}
	rt, body, err := protocol.NewFrameReader(s, 0).Next()
	if err != nil || rt != protocol.TypeError {
		t.Fatalf("answer %s, %v: want an error frame before any of the body was sent", rt, err)
	}
	var e nzcpb.Error
	if err := protocol.DecodeInto(rt, body, &e); err != nil || !errors.Is(protocol.FromWire(&e), protocol.ErrUnauthorized) {
		t.Fatalf("answer %v (%v), want unauthorized", &e, err)
	}
	select {
	case <-ran:
		t.Fatal("the handler ran")
	default:
	}
}

// A connection holds at most MaxInflight bytes of request bodies being
// read or handled: one more request is refused at once with unavailable,
// and goes through once the first is answered.
func TestInflightBytesPerConnectionAreBounded(t *testing.T) {
	ctx := testContext(t)
	client, started, release := blockedPair(t, func(c *Config) { c.MaxInflight = 1000 }, protocol.TypeLedgerSubmit,
		&nzcpb.LedgerResult{Code: nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED, Reason: "ok"})
	req := &nzcpb.LedgerSubmit{Command: make([]byte, 600)}
	first := make(chan error, 1)
	go func() { first <- client.Invoke(ctx, req, &nzcpb.LedgerResult{}) }()
	recv(t, started, "the first request")
	err := client.Invoke(ctx, req, &nzcpb.LedgerResult{})
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeUnavailable {
		t.Fatalf("a second request over the budget: %v, want unavailable", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := client.Invoke(ctx, req, &nzcpb.LedgerResult{}); err != nil {
		t.Fatalf("after the first was answered: %v", err)
	}
}

// blockedPair connects the aggregator to auditor-1, whose configuration
// limit changes first, and serves typ on auditor-1 with a handler that
// signals started as each request begins and answers reply only once
// release is closed: requests that hold a connection's resources.
func blockedPair(t *testing.T, limit func(*Config), typ protocol.MsgType, reply proto.Message) (client *Conn, started <-chan struct{}, release chan struct{}) {
	t.Helper()
	f := newFederation(t)
	srv := f.config(t, "auditor-1")
	limit(&srv)
	client, server := connectPair(t, listen(t, srv), f.config(t, "aggregator"), crypto.RoleAuditor)
	s, r := make(chan struct{}, 8), make(chan struct{})
	serve(t, server, Mux{typ: {Roles: []crypto.Role{crypto.RoleAggregator}, Handle: func(context.Context, *Request) (protocol.MsgType, []byte, error) {
		s <- struct{}{}
		<-r
		return Reply(reply)
	}}})
	return client, s, r
}
