package student

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// A run with a deadline ends at it, with a typed error that says what the
// batch was waiting for: the aggregator's last refusal (which names the
// auditors or hospitals that did not answer), an aggregator that had not
// answered yet, or one that could not be reached. Before, the student had
// no deadline and retried for as long as its attempts lasted.
func TestLabelGivesUpAtItsDeadline(t *testing.T) {
	m := cryptotest.Federation(t, t.TempDir(), cryptotest.Spec{Hospitals: 1, Auditors: 1, Students: 1})
	ca := cryptotest.CACert(t, m)
	agg := m.ByRole(crypto.RoleAggregator)[0]
	st := m.ByRole(crypto.RoleStudent)[0]
	hosp := cryptotest.Identity(t, m, m.ByRole(crypto.RoleHospital)[0])
	me := cryptotest.Identity(t, m, st)
	const refusal = "the ledger did not confirm the charge of batch x (no auditor answered: auditor 10.0.0.1:7300 was reached but gave no answer (unavailable: no leader); auditor 10.0.0.2:7300 could not be reached (timeout)): nothing was released"

	serve := func(t *testing.T, label func(ctx context.Context) (protocol.MsgType, []byte, error)) string {
		l, err := quicnet.Listen("127.0.0.1:0", quicnet.Config{CA: ca, Credential: cryptotest.Credential(t, m, agg)}, crypto.RoleStudent)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = l.Serve(ctx, quicnet.Mux{
				protocol.TypeHello: {Roles: []crypto.Role{crypto.RoleStudent}, Handle: func(context.Context, *quicnet.Request) (protocol.MsgType, []byte, error) {
					return quicnet.Reply(&nzcpb.Ack{ProtocolVersion: protocol.ProtocolVersion, PartyId: agg.ID})
				}},
				protocol.TypeLabelRequest: {Roles: []crypto.Role{crypto.RoleStudent}, Handle: func(ctx context.Context, _ *quicnet.Request) (protocol.MsgType, []byte, error) {
					return label(ctx)
				}},
			}, nil)
		}()
		t.Cleanup(func() { cancel(); <-done; l.Close() })
		return l.Addr().String()
	}
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	for _, tc := range []struct {
		name string
		addr func(t *testing.T) string
		want []string
	}{
		{"the ledger is unavailable", func(t *testing.T) string {
			return serve(t, func(context.Context) (protocol.MsgType, []byte, error) {
				return 0, nil, &protocol.Error{Code: protocol.CodeLedgerUnavailable, RetryAfter: 100 * time.Millisecond, Message: refusal}
			})
		}, []string{"gave up at the 2s deadline", "batch 1 was not labelled", "auditor 10.0.0.1:7300 was reached but gave no answer", "auditor 10.0.0.2:7300 could not be reached"}},
		{"the aggregator does not answer", func(t *testing.T) string {
			return serve(t, func(ctx context.Context) (protocol.MsgType, []byte, error) {
				<-ctx.Done()
				return 0, nil, ctx.Err()
			})
		}, []string{"gave up at the 2s deadline", "which had not answered"}},
		{"the aggregator cannot be reached", func(*testing.T) string { return silent.LocalAddr().String() },
			[]string{"gave up at the 2s deadline", "the aggregator at " + silent.LocalAddr().String() + " could not be reached"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr(t)
			c, err := New(Config{ID: st.ID, Aggregator: addr, Net: quicnet.Config{CA: ca, Credential: cryptotest.Credential(t, m, st)},
				Identity: me, Hospitals: []*crypto.Recipient{hosp.Recipient()}, AuditorKeys: proofKeys.NewLedger(t, "h1").AuditorKeys(),
				BatchSize: 2, StateDir: t.TempDir(), Deadline: 2 * time.Second,
				Backoff: quicnet.Backoff{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			d := &data.Dataset{X: make([]float32, 4*3), Y: make([]int, 4), Shape: data.Shape{Height: 1, Width: 3, Channels: 1}, Classes: 2}
			start := time.Now()
			_, err = c.Label(t.Context(), d, nil)
			took := time.Since(start)
			var de *DeadlineError
			if !errors.As(err, &de) || !errors.Is(err, ErrDeadline) {
				t.Fatalf("Label past its deadline: %v, want a DeadlineError", err)
			}
			if took > time.Minute {
				t.Errorf("gave up after %v with a deadline of 2s", took)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}
