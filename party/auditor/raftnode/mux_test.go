package raftnode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nzcfed/nzc/internal/syncbuf"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
)

// raft's NetworkTransport closes neither the connections it accepted nor its
// pool of dialled ones; the listener must, or a peer's pooled connection
// keeps a handler goroutine of a stopped node reading for ever.
func TestMuxClosesRaftConnections(t *testing.T) {
	ca := newTestCA(t)
	var servers []raft.Server // the raft configuration every listener sees
	mux := func(id string) *streamLayer {
		s := ca.streamLayer(t, id)
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(s.m.advertise.String())})
		s.m.peers.set(func() []raft.Server { return servers })
		return s
	}
	a, b := mux("a"), mux("b")

	dialled, err := b.Dial(raft.ServerAddress(a.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	accepted, err := a.Accept()
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := accepted.Read(make([]byte, 1))
		read <- err
	}()

	// Stopping a ends its handler's read with the end raft expects, even
	// though b still holds the connection in its pool.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-read:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("the accepted connection's read ended with %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("closing the listener left the accepted raft connection open")
	}

	// Stopping b closes its dialled connection.
	b.Close()
	if _, err := dialled.Write([]byte{0}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("writing on b's dialled connection after b closed: %v, want net.ErrClosed", err)
	}
	// A connection dialled after the close is not kept open.
	c := mux("c")
	if _, err := b.Dial(raft.ServerAddress(c.Addr().String()), 5*time.Second); err == nil {
		t.Fatal("a closed listener dialled a new raft connection")
	}
}

// The raft channel admits only current auditor certificates of the
// federation's CA: an expired one, another role's, or another CA's is cut
// off at the handshake (the peer's first read fails at once), while a
// current auditor is handed to raft, which waits for its first RPC.
func TestRaftChannelRefusesBadCertificates(t *testing.T) {
	ca := newTestCA(t)
	server, _ := ca.tlsPair(t, "auditor", "a")
	var logs syncbuf.Buffer
	m, err := newMuxListener("127.0.0.1:0", nil, server, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); m.wait() })
	s := &streamLayer{m: m}
	go func() {
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	client := func(cert tls.Certificate, roots *x509.CertPool) *tls.Config {
		return clientTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS13})
	}
	other := newTestCA(t)
	for _, tc := range []struct {
		name  string
		cert  tls.Certificate
		admit bool
		// what the refused party reads, and what the auditor logs
		peer, log string
	}{
		{"a current auditor", ca.issue(t, "auditor", "b"), true, "", ""},
		{"an expired auditor certificate", ca.issueValid(t, "auditor", "b", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)), false,
			"expired certificate", "expired"},
		{"an auditor certificate not yet valid", ca.issueValid(t, "auditor", "b", time.Now().Add(time.Hour), time.Now().Add(48*time.Hour)), false,
			"expired certificate", "not yet valid"},
		{"a hospital certificate", ca.issue(t, "hospital", "b"), false, "bad certificate", ErrNotAuditor.Error()},
		{"an aggregator certificate", ca.issue(t, "aggregator", "b"), false, "bad certificate", ErrNotAuditor.Error()},
		{"an auditor of another CA", other.issue(t, "auditor", "b"), false, "unknown certificate authority", "unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			c, err := dialChannel(ctx, m.ln.Addr().String(), client(tc.cert, ca.pool), chanRaft)
			if err != nil {
				if tc.admit {
					t.Fatal(err)
				}
				return // refused during the handshake
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			_, err = c.Read(make([]byte, 1))
			var ne net.Error
			timedOut := errors.As(err, &ne) && ne.Timeout()
			if tc.admit != timedOut {
				t.Fatalf("read on the raft channel: %v; want %s", err, map[bool]string{true: "a time-out (admitted)", false: "a refusal"}[tc.admit])
			}
			if tc.admit {
				return
			}
			if !strings.Contains(err.Error(), tc.peer) {
				t.Errorf("the refused party reads %q, which does not say %q", err, tc.peer)
			}
			auditortest.WaitFor(t, 5*time.Second, "the auditor to log the refusal", func() bool { return strings.Contains(logs.String(), tc.log) })
		})
	}
}
