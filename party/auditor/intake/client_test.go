package intake

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// An auditor that answers not-leader, naming the leader among the
// client's addresses, sends the client there next, past the others.
func TestClientFollowsNotLeader(t *testing.T) {
	m, _ := provisionedGenesis(t, "nzc.test/ledger", time.Unix(1_800_000_000, 0))
	// One auditor's credential serves all three: what counts is which address is called.
	au := m.ByRole(crypto.RoleAuditor)[0]
	var mu sync.Mutex
	calls := map[int]int{}
	addrs := make([]string, 3)
	var leader string
	for i := range addrs {
		l, err := quicnet.Listen("127.0.0.1:0", netConfig(t, m, au), crypto.RoleAggregator, crypto.RoleHospital)
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = l.Addr().String()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = l.Serve(ctx, quicnet.Mux{protocol.TypeLedgerSubmit: {Roles: []crypto.Role{crypto.RoleHospital},
				Handle: func(context.Context, *quicnet.Request) (protocol.MsgType, []byte, error) {
					mu.Lock()
					calls[i]++
					mu.Unlock()
					if i != 2 {
						return 0, nil, protocol.NotLeader(leader)
					}
					return quicnet.Reply(&nzcpb.LedgerResult{Code: nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED, Index: 7})
				}}}, nil)
		}()
		t.Cleanup(func() { cancel(); <-done; l.Close() })
	}
	leader = addrs[2]
	lc, err := NewClient(netConfig(t, m, m.ByRole(crypto.RoleHospital)[0]), addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	res, err := lc.Submit(t.Context(), []byte{1})
	if err != nil || res.GetIndex() != 7 {
		t.Fatalf("submit: %v %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls[0] != 1 || calls[1] != 0 || calls[2] != 1 {
		t.Fatalf("calls per auditor %v: want the first, then the leader it named, and never the one between", calls)
	}
}

func netConfig(t *testing.T, m *crypto.Manifest, p crypto.PartyFiles) quicnet.Config {
	t.Helper()
	cfg, err := quicnet.LoadConfig(m.Path(m.CACert), m.Path(p.Cert), m.Path(p.Key))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
