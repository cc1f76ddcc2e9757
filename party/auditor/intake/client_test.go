package intake

import (
	"context"
	"errors"
	"net"
	"strings"
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

// When no auditor answers, the error says which auditor was reached and
// what it said, which could not be reached, and which were not tried:
// before, an auditor that was reached but had no majority was reported as
// "no auditor reachable".
func TestClientNamesEachAuditor(t *testing.T) {
	m, _ := provisionedGenesis(t, "nzc.test/ledger", time.Unix(1_800_000_000, 0))
	au := m.ByRole(crypto.RoleAuditor)[0]
	l, err := quicnet.Listen("127.0.0.1:0", netConfig(t, m, au), crypto.RoleAggregator, crypto.RoleHospital)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Serve(ctx, quicnet.Mux{protocol.TypeLedgerSubmit: {Roles: []crypto.Role{crypto.RoleHospital},
			Handle: func(context.Context, *quicnet.Request) (protocol.MsgType, []byte, error) {
				return 0, nil, protocol.Errorf(protocol.CodeUnavailable, "this auditor has no leader")
			}}}, nil)
	}()
	t.Cleanup(func() { cancel(); <-done; l.Close() })
	// A socket that reads nothing: a handshake with it never completes.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	addrs := []string{l.Addr().String(), silent.LocalAddr().String(), "127.0.0.1:9"}
	lc, err := NewClient(netConfig(t, m, m.ByRole(crypto.RoleHospital)[0]), addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	sctx, scancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer scancel()
	_, err = lc.Submit(sctx, []byte{1})
	var ue *UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("submit with no auditor answering: %v, want an UnavailableError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"auditor " + addrs[0] + " was reached but gave no answer", "this auditor has no leader",
		"auditor " + addrs[1] + " could not be reached",
		"auditor " + addrs[2] + " was not tried",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q:\n%s", want, msg)
		}
	}
}
