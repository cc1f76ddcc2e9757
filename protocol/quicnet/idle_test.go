package quicnet

import (
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/protocol"
)

// TestKeepAliveAndIdleTimeout: keep-alives hold an idle connection open
// past the idle timeout, and a peer that vanishes without closing is
// noticed within the idle timeout.
func TestKeepAliveAndIdleTimeout(t *testing.T) {
	f := newFederation(t)
	ctx := testContext(t)
	const idle = 400 * time.Millisecond
	scfg, ccfg := f.config(t, "auditor-1"), f.config(t, "aggregator")
	for _, c := range []*Config{&scfg, &ccfg} {
		c.IdleTimeout, c.KeepAlive = idle, idle/4
	}
	l := listen(t, scfg)
	client, server := connectPair(t, l, ccfg, crypto.RoleAuditor)
	serve(t, server, echoMux(crypto.RoleAggregator))

	// Stay idle for three idle timeouts: the connection must survive.
	select {
	case <-client.Done():
		t.Fatalf("idle connection closed despite keep-alives: %v", client.Err())
	case <-time.After(3 * idle):
	}
	if _, _, err := client.Call(ctx, protocol.TypeLedgerSubmit, []byte("still here")); err != nil {
		t.Fatal(err)
	}

	// The server vanishes without a CONNECTION_CLOSE (its transport and
	// socket are torn down): the client notices through the idle timeout.
	start := time.Now()
	l.tr.Close()
	l.udp.Close()
	recv(t, client.Done(), "the dead peer to be noticed")
	if waited := time.Since(start); waited > 10*idle {
		t.Fatalf("dead peer noticed after %v, idle timeout %v", waited, idle)
	}
	if client.Err() == nil {
		t.Fatal("closed connection reports no reason")
	}
}
