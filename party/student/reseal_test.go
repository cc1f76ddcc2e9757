package student

import (
	"context"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// A batch in flight when the connection to the aggregator breaks is sealed
// again on the retry when the reconnection taught the student a hospital
// (one admitted meanwhile, passed in the new connection's Ack): that
// hospital can open the batch it is asked for. Before, the retry resent
// the batch sealed to the hospitals known before the break, and the new
// hospital was left out of it.
func TestRetryAfterReconnectSealsToLearnedHospitals(t *testing.T) {
	m := cryptotest.Federation(t, t.TempDir(), cryptotest.Spec{Hospitals: 2, Auditors: 1, Students: 1})
	ca := cryptotest.CACert(t, m)
	agg := m.ByRole(crypto.RoleAggregator)[0]
	st := m.ByRole(crypto.RoleStudent)[0]
	hs := m.ByRole(crypto.RoleHospital)
	h1, h2 := cryptotest.Identity(t, m, hs[0]), cryptotest.Identity(t, m, hs[1])
	admin, h2Key := seededKey(1), seededKey(2)
	h2Signed := signed(hs[1].ID, h2.Recipient(), h2Key, registerHospital(t, hs[1].ID, h2Key.Public().(ed25519.PublicKey), admin))

	// serve runs an aggregator on addr that passes hospitals in its Ack and
	// hands each label request to label; stop closes its connections.
	serve := func(addr string, hospitals []*nzcpb.SignedRecipient, label func(*nzcpb.LabelRequest) error) (string, func()) {
		l, err := quicnet.Listen(addr, quicnet.Config{CA: ca, Credential: cryptotest.Credential(t, m, agg)}, crypto.RoleStudent)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = l.Serve(ctx, quicnet.Mux{
				protocol.TypeHello: {Roles: []crypto.Role{crypto.RoleStudent}, Handle: func(context.Context, *quicnet.Request) (protocol.MsgType, []byte, error) {
					return quicnet.Reply(&nzcpb.Ack{ProtocolVersion: protocol.ProtocolVersion, PartyId: agg.ID, Hospitals: hospitals})
				}},
				protocol.TypeLabelRequest: {Roles: []crypto.Role{crypto.RoleStudent}, Handle: func(_ context.Context, r *quicnet.Request) (protocol.MsgType, []byte, error) {
					var req nzcpb.LabelRequest
					if err := r.Decode(&req); err != nil {
						return 0, nil, err
					}
					return 0, nil, label(&req)
				}},
			}, nil)
		}()
		stopped := false
		stop := func() {
			if !stopped {
				stopped = true
				l.Close()
				cancel()
				<-done
			}
		}
		t.Cleanup(stop)
		return l.Addr().String(), stop
	}

	// The first aggregator knows hospital-1 only and holds the request
	// until its connections close.
	asked, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	addr, stop := serve("127.0.0.1:0", nil, func(*nzcpb.LabelRequest) error {
		select {
		case asked <- struct{}{}:
		default:
		}
		<-release
		return errors.New("stopped")
	})
	c, err := New(Config{ID: st.ID, Aggregator: addr, Net: quicnet.Config{CA: ca, Credential: cryptotest.Credential(t, m, st)},
		Identity: cryptotest.Identity(t, m, st), Hospitals: []*crypto.Recipient{h1.Recipient()}, AdminKey: admin.Public().(ed25519.PublicKey),
		AuditorKeys: proofKeys.NewLedger(t, "h1").AuditorKeys(), BatchSize: 2, StateDir: t.TempDir(), Attempts: 100,
		Backoff: quicnet.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	d := &data.Dataset{X: make([]float32, 2*3), Y: make([]int, 2), Shape: data.Shape{Height: 1, Width: 3, Channels: 1}, Classes: 2}
	result := make(chan error, 1)
	go func() {
		_, err := c.Label(t.Context(), d, nil)
		result <- err
	}()
	select {
	case <-asked:
	case err := <-result:
		t.Fatalf("the run ended before the batch was asked: %v", err)
	}

	// The aggregator goes away with the request in flight and comes back on
	// its address, now passing hospital-2, admitted meanwhile.
	stop()
	opened := make(chan bool, 1)
	serve(addr, []*nzcpb.SignedRecipient{h2Signed}, func(req *nzcpb.LabelRequest) error {
		_, err := crypto.Open(req.GetSealedFeatures(), h2)
		opened <- err == nil
		return &protocol.Error{Code: protocol.CodeBadRequest, Message: "the test ends the run here"}
	})
	select {
	case ok := <-opened:
		if !ok {
			t.Fatal("the batch retried after the reconnection is not sealed to the hospital its Ack passed")
		}
	case err := <-result:
		t.Fatalf("the run ended without asking the aggregator again: %v", err)
	}
	if err := <-result; !errors.Is(err, ErrStopped) {
		t.Fatalf("the run ended with %v, want the test's refusal", err)
	}
}
