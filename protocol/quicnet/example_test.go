package quicnet_test

import (
	"context"
	"log/slog"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// A hospital dials the aggregator, registers, and answers its query
// batches over the same connection, reconnecting whenever it drops.
func ExampleKeepConnected() {
	cfg, err := quicnet.LoadConfig("fed/ca/ca.crt", "fed/hospital-1/tls.crt", "fed/hospital-1/tls.key")
	if err != nil {
		return
	}
	cfg.Logger = slog.Default()
	aggregator := quicnet.Target{Name: "aggregator", Addr: "10.0.0.1:7400", Role: crypto.RoleAggregator}
	mux := quicnet.Mux{
		protocol.TypeQueryBatch: {Roles: []crypto.Role{crypto.RoleAggregator}, Handle: func(ctx context.Context, req *quicnet.Request) (protocol.MsgType, []byte, error) {
			var q nzcpb.QueryBatch
			if err := req.Decode(&q); err != nil {
				return 0, nil, err // answered bad-request
			}
			// … open the features, let the teachers vote, seal the
			// histograms to the aggregator …
			return quicnet.Reply(&nzcpb.VoteBatch{BatchId: q.GetBatchId() /* … */})
		}},
	}
	_ = quicnet.KeepConnected(context.Background(), cfg, aggregator, quicnet.Backoff{},
		func(ctx context.Context, c *quicnet.Conn) error {
			var ack nzcpb.Ack
			hello := &nzcpb.Hello{ProtocolVersion: protocol.ProtocolVersion, Role: nzcpb.Role_ROLE_HOSPITAL, PartyId: "hospital-1" /* … */}
			if err := c.Invoke(ctx, hello, &ack); err != nil {
				return err
			}
			return c.Serve(ctx, mux)
		})
}

// The aggregator listens for hospitals and students and serves each
// connection; it keeps hospitals' connections to send them query batches.
func ExampleListen() {
	cfg, err := quicnet.LoadConfig("fed/ca/ca.crt", "fed/aggregator/tls.crt", "fed/aggregator/tls.key")
	if err != nil {
		return
	}
	l, err := quicnet.Listen(":7400", cfg, crypto.RoleHospital, crypto.RoleStudent)
	if err != nil {
		return
	}
	defer l.Close()
	ctx := context.Background()
	mux := quicnet.Mux{
		protocol.TypeLabelRequest: {Roles: []crypto.Role{crypto.RoleStudent}, Handle: func(ctx context.Context, req *quicnet.Request) (protocol.MsgType, []byte, error) {
			return 0, nil, protocol.Errorf(protocol.CodeQuorumNotMet, "waiting for 2 of 3 hospitals")
		}},
	}
	for {
		c, err := l.Accept(ctx)
		if err != nil {
			return
		}
		go c.Serve(ctx, mux)
	}
}
