package raftnode

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// A raft connection speaks only for the certificate that opened it. raft's
// NetworkTransport takes the sender's id and address from each RPC's
// RPCHeader, which the sender writes: without a check, any auditor could
// ask for votes or lead as another. Every RPC read on an accepted raft
// connection is read here first and reaches raft only when its header
// names the certificate's id. raft reads exactly the bytes the peer sent.
//
// The check decodes, with the codec raft uses, the header fields raft
// reads (RPCHeader's ID and Addr, the legacy Leader and Candidate
// addresses) and InstallSnapshot's Size, skipping the rest, and requires
// the request to be a msgpack map, as raft writes it: a map's fields are
// named, so both decoders give every field the same value (an array's
// fields are positional, and the two structs differ). The header's address
// is not compared with the configuration: raft writes its resolved
// listening address there, while the configuration may name the same
// server by host name.

// Raft's wire RPC types (hashicorp/raft net_transport.go).
const (
	rpcAppendEntries byte = iota
	rpcRequestVote
	rpcInstallSnapshot
	rpcTimeoutNow
	rpcRequestPreVote
)

const (
	// maxRPCBytes bounds one RPC, the snapshot data that follows an
	// InstallSnapshot aside: raft sends at most 512 entries (Config's
	// MaxAppendEntries) per AppendEntries, and a packed entry holds at
	// most maxBatchBytes of commands plus one.
	maxRPCBytes = 256 << 20
	// guardReadBuffer is the size of the guard's read buffer on the TLS
	// stream.
	guardReadBuffer = 64 << 10
	// keepRPCBuffer is the largest RPC buffer kept for the next RPC.
	keepRPCBuffer = 1 << 20
)

var (
	// ErrRPCImpersonation means a raft RPC's header named a server other
	// than the certificate that opened the connection; the connection is
	// closed and the RPC never reaches raft.
	ErrRPCImpersonation = errors.New("auditor: raft RPC speaks for a server other than its connection's certificate")
	errRPCTooLarge      = fmt.Errorf("auditor: raft RPC exceeds %d bytes", maxRPCBytes)
	errRPCNotMap        = errors.New("auditor: raft RPC is not a msgpack map")
)

// rpcHead is what the guard decodes of a request: the fields of raft's
// request types that name the sender, and the length of the snapshot data
// after an InstallSnapshot. The field names and types are raft's.
type rpcHead struct {
	raft.RPCHeader
	Leader    []byte
	Candidate []byte
	Size      int64
}

// guardedConn is an accepted raft connection whose reads pass the guard;
// writes, deadlines and Close go to the connection itself.
type guardedConn struct {
	net.Conn
	g *rpcGuard
}

func (c *guardedConn) Read(p []byte) (int, error) { return c.g.Read(p) }

// guard returns c with its reads checked for peer, the auditor id of the
// certificate that opened it. An RPC speaking for another server closes c
// and is counted; any other error ends the reads and raft closes c.
func (m *muxListener) guard(c net.Conn, peer string) net.Conn {
	g := newRPCGuard(c, peer)
	g.refuse = func(err error) {
		m.refused.Add(1)
		m.log.Warn("closed a raft connection that spoke for another server", "remote", c.RemoteAddr().String(), "certificate", peer, "error", err)
		_ = c.Close()
	}
	return &guardedConn{Conn: c, g: g}
}

// rpcGuard reads raft RPCs from a peer and hands raft each one that speaks
// for peer, byte for byte. It is read by one goroutine (raft's handler of
// the connection).
type rpcGuard struct {
	br     *bufio.Reader
	peer   string
	dec    *codec.Decoder
	refuse func(error) // called once with the ErrRPCImpersonation that ended the stream

	raw     []byte // the current RPC as read, for the decoder's reads
	pending []byte // checked bytes raft has not read yet
	snap    int64  // snapshot bytes still to pass through
	err     error  // the error every later read returns
}

func newRPCGuard(r io.Reader, peer string) *rpcGuard {
	g := &rpcGuard{br: bufio.NewReaderSize(r, guardReadBuffer), peer: peer, refuse: func(error) {}}
	g.dec = codec.NewDecoder((*rpcCapture)(g), &codec.MsgpackHandle{})
	return g
}

// Read gives raft the checked bytes of the RPCs, reading and checking the
// next RPC when it has read all of the last one.
func (g *rpcGuard) Read(p []byte) (int, error) {
	if len(g.pending) == 0 && g.snap == 0 {
		if g.err != nil {
			return 0, g.err
		}
		if err := g.next(); err != nil {
			g.err = err
			if errors.Is(err, ErrRPCImpersonation) {
				g.refuse(err)
			}
			return 0, err
		}
	}
	if len(g.pending) > 0 {
		n := copy(p, g.pending)
		g.pending = g.pending[n:]
		return n, nil
	}
	n, err := g.br.Read(p[:min(int64(len(p)), g.snap)])
	g.snap -= int64(n)
	return n, err
}

// next reads one RPC into pending, or returns why it must not reach raft.
func (g *rpcGuard) next() error {
	if cap(g.raw) > keepRPCBuffer {
		g.raw = nil
	}
	g.raw = g.raw[:0]
	c := (*rpcCapture)(g)
	typ, err := c.ReadByte()
	if err != nil {
		return err
	}
	if typ > rpcRequestPreVote {
		g.pending = g.raw // raft refuses it and closes the connection
		return nil
	}
	b, err := c.ReadByte()
	if err != nil {
		return noEOF(err)
	}
	if !(b >= 0x80 && b <= 0x8f || b == 0xde || b == 0xdf) {
		return fmt.Errorf("%w (first byte %#x)", errRPCNotMap, b)
	}
	_ = c.UnreadByte()
	var h rpcHead
	if err := g.dec.Decode(&h); err != nil {
		if len(g.raw) >= maxRPCBytes {
			return errRPCTooLarge
		}
		return noEOF(err)
	}
	if err := checkHeader(g.peer, typ, &h); err != nil {
		return err
	}
	g.pending = g.raw
	if typ == rpcInstallSnapshot && h.Size > 0 {
		g.snap = h.Size
	}
	return nil
}

// noEOF turns the end of the stream inside an RPC into an error raft
// reports.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// checkHeader accepts an RPC's header when its id is the certificate's and
// its address is set (raft then ignores the legacy Leader or Candidate
// field, which must be empty or agree).
func checkHeader(peer string, typ byte, h *rpcHead) error {
	switch {
	case string(h.ID) != peer:
		return fmt.Errorf("%w: RPC type %d with header id %q from the certificate of %q", ErrRPCImpersonation, typ, h.ID, peer)
	case len(h.Addr) == 0:
		return fmt.Errorf("%w: RPC type %d from %q carries no address", ErrRPCImpersonation, typ, peer)
	case len(h.Leader) > 0 && string(h.Leader) != string(h.Addr),
		len(h.Candidate) > 0 && string(h.Candidate) != string(h.Addr):
		return fmt.Errorf("%w: RPC type %d from %q names address %q and a legacy address %q%q", ErrRPCImpersonation, typ, peer, h.Addr, h.Leader, h.Candidate)
	}
	return nil
}

// rpcCapture is the guard as the decoder reads it: an io.ByteScanner over
// the peer's stream that records every byte the decoder takes in raw, and
// nothing more, up to maxRPCBytes.
type rpcCapture rpcGuard

func (c *rpcCapture) Read(p []byte) (int, error) {
	if len(c.raw) >= maxRPCBytes {
		return 0, errRPCTooLarge
	}
	p = p[:min(len(p), maxRPCBytes-len(c.raw))]
	n, err := c.br.Read(p)
	c.raw = append(c.raw, p[:n]...)
	return n, err
}

func (c *rpcCapture) ReadByte() (byte, error) {
	if len(c.raw) >= maxRPCBytes {
		return 0, errRPCTooLarge
	}
	b, err := c.br.ReadByte()
	if err == nil {
		c.raw = append(c.raw, b)
	}
	return b, err
}

func (c *rpcCapture) UnreadByte() error {
	if len(c.raw) == 0 {
		return bufio.ErrInvalidUnreadByte
	}
	if err := c.br.UnreadByte(); err != nil {
		return err
	}
	c.raw = c.raw[:len(c.raw)-1]
	return nil
}

// raftPeers answers which server the raft configuration places at an
// address. The node sets its source once raft exists; until
// then the configuration is empty.
type raftPeers struct {
	mu   sync.RWMutex
	list func() []raft.Server
}

func (p *raftPeers) set(list func() []raft.Server) {
	p.mu.Lock()
	p.list = list
	p.mu.Unlock()
}

// fromRaft is the source of a node's raft: its latest configuration.
func fromRaft(r *raft.Raft) func() []raft.Server {
	return func() []raft.Server {
		f := r.GetConfiguration()
		if f.Error() != nil {
			return nil
		}
		return f.Configuration().Servers
	}
}

func (p *raftPeers) servers() []raft.Server {
	p.mu.RLock()
	list := p.list
	p.mu.RUnlock()
	if list == nil {
		return nil
	}
	return list()
}

// idAt returns the id the configuration gives addr.
func (p *raftPeers) idAt(addr string) (string, bool) {
	for _, s := range p.servers() {
		if string(s.Address) == addr {
			return string(s.ID), true
		}
	}
	return "", false
}
