package raftnode

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
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
// The guard first finds where the request ends by walking its msgpack
// structure (without decoding), then decodes, with the codec raft uses,
// the header fields raft reads (RPCHeader's ID and Addr, the legacy Leader
// and Candidate addresses) and InstallSnapshot's Size from exactly those
// bytes, skipping the rest, and requires the codec to have read all of
// them: a disagreement on where the request ends refuses it. The request
// must be a msgpack map, as raft writes it: a map's fields are named, so
// both decoders give every field the same value (an array's fields are
// positional, and the two structs differ). raft also records votes and
// the leader by the header's address, so an address the raft
// configuration gives to another server is refused too (an address the
// configuration does not name, such as a resolved form of a host name, is
// let through: the id is what binds it).

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
	// InstallSnapshot aside. A packed entry holds less than maxBatchBytes
	// of commands plus one more, and no command is larger than
	// maxBatchBytes (Submit refuses it), so an entry is under
	// 2 × maxBatchBytes; raft sends at most maxAppendEntries of them per
	// AppendEntries, which therefore always fits, and a follower catching
	// up on a backlog is never refused.
	maxRPCBytes = 1 << 30
	// maxAppendEntries is raft's MaxAppendEntries: as many of the largest
	// entries, with room for their framing, as one RPC may hold (127).
	maxAppendEntries = maxRPCBytes / (2*maxBatchBytes + 64<<10)
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
	g.idAt = m.peers.idAt
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
	idAt   func(addr string) (string, bool) // the configuration's server at an address; nil knows none
	dec    *codec.Decoder
	refuse func(error) // called once with the ErrRPCImpersonation that ended the stream

	raw     []byte // the current RPC as read
	pending []byte // checked bytes raft has not read yet
	snap    int64  // snapshot bytes still to pass through
	err     error  // the error every later read returns
}

func newRPCGuard(r io.Reader, peer string) *rpcGuard {
	g := &rpcGuard{br: bufio.NewReaderSize(r, guardReadBuffer), peer: peer, refuse: func(error) {}}
	g.dec = codec.NewDecoderBytes(nil, &codec.MsgpackHandle{})
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
	typ, err := g.br.ReadByte()
	if err != nil {
		return err
	}
	g.raw = append(g.raw, typ)
	if typ > rpcRequestPreVote {
		g.pending = g.raw // raft refuses it and closes the connection
		return nil
	}
	b, err := g.br.Peek(1)
	if err != nil {
		return noEOF(err)
	}
	if !(b[0] >= 0x80 && b[0] <= 0x8f || b[0] == 0xde || b[0] == 0xdf) {
		return fmt.Errorf("%w (first byte %#x)", errRPCNotMap, b[0])
	}
	if err := g.readValue(); err != nil {
		return noEOF(err)
	}
	var h rpcHead
	g.dec.ResetBytes(g.raw[1:])
	if err := g.dec.Decode(&h); err != nil {
		return fmt.Errorf("auditor: raft RPC type %d does not decode: %w", typ, err)
	}
	if n := g.dec.NumBytesRead(); n != len(g.raw)-1 {
		return fmt.Errorf("auditor: raft RPC type %d: the codec read %d of its %d bytes", typ, n, len(g.raw)-1)
	}
	if err := checkHeader(g.peer, typ, &h, g.idAt); err != nil {
		return err
	}
	g.pending = g.raw
	if typ == rpcInstallSnapshot && h.Size > 0 {
		g.snap = h.Size
	}
	return nil
}

// readValue appends one msgpack value from br to raw, walking its
// structure without decoding it.
func (g *rpcGuard) readValue() error {
	r := valueReader{br: g.br, raw: g.raw}
	err := r.value()
	g.raw = r.raw
	return err
}

// valueReader walks one msgpack value. It lives on the stack while it
// runs: appending to raw there costs no write barrier per byte.
type valueReader struct {
	br  *bufio.Reader
	raw []byte
}

func (r *valueReader) value() error {
	for left := uint64(1); left > 0; left-- {
		b, err := r.take(1)
		if err != nil {
			return err
		}
		t := b[0]
		var size, count uint64 // payload bytes; values contained
		switch {
		case t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3:
		case t <= 0x8f:
			count = 2 * uint64(t&0x0f)
		case t <= 0x9f:
			count = uint64(t & 0x0f)
		case t <= 0xbf:
			size = uint64(t & 0x1f)
		case t == 0xc4 || t == 0xd9: // bin8, str8
			size, err = r.length(1)
		case t == 0xc5 || t == 0xda:
			size, err = r.length(2)
		case t == 0xc6 || t == 0xdb:
			size, err = r.length(4)
		case t == 0xc7, t == 0xc8, t == 0xc9: // ext8/16/32: length, then a type byte
			size, err = r.length(1 << (t - 0xc7))
			size++
		case t == 0xca || t == 0xce || t == 0xd2:
			size = 4
		case t == 0xcb || t == 0xcf || t == 0xd3:
			size = 8
		case t == 0xcc || t == 0xd0:
			size = 1
		case t == 0xcd || t == 0xd1:
			size = 2
		case t >= 0xd4 && t <= 0xd8: // fixext: a type byte and 1..16 bytes
			size = 1 + 1<<(t-0xd4)
		case t == 0xdc:
			count, err = r.length(2)
		case t == 0xdd:
			count, err = r.length(4)
		case t == 0xde:
			count, err = r.length(2)
			count *= 2
		case t == 0xdf:
			count, err = r.length(4)
			count *= 2
		default: // 0xc1, never used
			return fmt.Errorf("auditor: raft RPC holds the unused msgpack byte %#x", t)
		}
		if err != nil {
			return err
		}
		// Every value is at least one byte: a count or size beyond the
		// bound cannot arrive within it.
		if size > maxRPCBytes || count > maxRPCBytes || left+count > maxRPCBytes {
			return errRPCTooLarge
		}
		left += count
		if size > 0 {
			if _, err := r.take(int(size)); err != nil {
				return err
			}
		}
	}
	return nil
}

// length reads a big-endian length of n bytes.
func (r *valueReader) length(n int) (uint64, error) {
	b, err := r.take(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// takeChunk is the most take allocates ahead of the bytes arriving: a
// peer that announces a large field without sending it costs little.
const takeChunk = 1 << 20

// take appends the next n bytes of the stream to raw and returns them.
func (r *valueReader) take(n int) ([]byte, error) {
	if len(r.raw)+n > maxRPCBytes {
		return nil, errRPCTooLarge
	}
	start := len(r.raw)
	if n <= r.br.Buffered() {
		b, _ := r.br.Peek(n)
		r.raw = append(r.raw, b...)
		_, _ = r.br.Discard(n)
		return r.raw[start:], nil
	}
	for left := n; left > 0; {
		k := min(left, takeChunk)
		at := len(r.raw)
		r.raw = slices.Grow(r.raw, k)[:at+k]
		if _, err := io.ReadFull(r.br, r.raw[at:]); err != nil {
			r.raw = r.raw[:start]
			return nil, err
		}
		left -= k
	}
	return r.raw[start:], nil
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
func checkHeader(peer string, typ byte, h *rpcHead, idAt func(string) (string, bool)) error {
	if idAt != nil {
		if id, ok := idAt(string(h.Addr)); ok && id != peer {
			return fmt.Errorf("%w: RPC type %d from %q names address %q, which the configuration gives %q", ErrRPCImpersonation, typ, peer, h.Addr, id)
		}
	}
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
