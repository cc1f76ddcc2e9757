package auditor

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// raft's NetworkTransport closes neither the connections it accepted nor its
// pool of dialled ones; the listener must, or a peer's pooled connection
// keeps a handler goroutine of a stopped node reading for ever.
func TestMuxClosesRaftConnections(t *testing.T) {
	ca := newTestCA(t)
	mux := func(id string) *streamLayer {
		server, client := ca.tlsPair(t, "auditor", id)
		m, err := newMuxListener("127.0.0.1:0", nil, server, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(); m.wait() })
		return &streamLayer{m: m, client: clientTLS(client)}
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
