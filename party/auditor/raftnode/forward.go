package raftnode

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The forwarding RPC lets any auditor accept a command and hand it to the
// leader over the same mutual-TLS port as raft. A connection carries one
// request at a time:
//
//	request:  op | uvarint timeout-ms | uvarint len | body
//	response: code | uvarint index | uvarint len | body
//
// The leader serves a forwarded request only locally (it never forwards it
// again), so a request is never bounced around the cluster.

const (
	opSubmit     byte = 1
	opJoin       byte = 2
	opRemove     byte = 3
	opCheckpoint byte = 4
	// opRemoveSigned removes another auditor on the proof of a quorum's
	// signatures (Node.RemoveSigned): any auditor may forward it, and the
	// leader checks the proof itself.
	opRemoveSigned byte = 5
	// opEntries asks for entries of the history (HistoryProvider), for
	// an auditor restoring a snapshot that does not hold them.
	opEntries byte = 6
)

const (
	codeOK byte = iota
	codeRejected
	codeNotLeader
	codeNoLeader
	codeTimeout
	codeShutdown
	codeOutcomeUnknown
	codeError
	codeMembership  // a membership change refused: ErrMembership
	codeNotProposed // a command refused before proposal: ErrNotProposed
	codePeerBudget  // the forwarding auditor is over its byte budget: ErrPeerBudget
)

// maxFrame bounds every request and response body.
const maxFrame = 16 << 20

// maxIdlePerPeer bounds the idle forwarding connections kept per leader.
const maxIdlePerPeer = 64

func writeFrame(w *bufio.Writer, head byte, n uint64, body []byte) error {
	var hdr [1 + 2*binary.MaxVarintLen64]byte
	hdr[0] = head
	k := 1 + binary.PutUvarint(hdr[1:], n)
	k += binary.PutUvarint(hdr[k:], uint64(len(body)))
	if _, err := w.Write(hdr[:k]); err != nil {
		return err
	}
	if _, err := w.Write(body); err != nil {
		return err
	}
	return w.Flush()
}

func readFrame(r *bufio.Reader) (head byte, n uint64, body []byte, err error) {
	return readFrameThen(r, nil)
}

// readFrameThen is readFrame that calls started, when not nil, once the
// frame's first byte has arrived. The body's buffer grows as its bytes
// arrive, so a peer that announces a large body without sending it costs
// little memory.
func readFrameThen(r *bufio.Reader, started func()) (head byte, n uint64, body []byte, err error) {
	if head, err = r.ReadByte(); err != nil {
		return 0, 0, nil, err
	}
	if started != nil {
		started()
	}
	if n, err = binary.ReadUvarint(r); err != nil {
		return 0, 0, nil, err
	}
	size, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, 0, nil, err
	}
	if size > maxFrame {
		return 0, 0, nil, fmt.Errorf("frame of %d bytes exceeds the %d-byte limit", size, maxFrame)
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, r, int64(size)); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, err
	}
	return head, n, buf.Bytes(), nil
}

func encodePair(a, b string) []byte {
	out := binary.AppendUvarint(nil, uint64(len(a)))
	out = append(out, a...)
	return append(out, b...)
}

func decodePair(p []byte) (string, string, error) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)-k) {
		return "", "", errors.New("malformed pair")
	}
	return string(p[k : k+int(n)]), string(p[k+int(n):]), nil
}

// encodeResult turns the outcome of a local operation into a response.
func encodeResult(data []byte, index uint64, err error) (byte, uint64, []byte) {
	var rej *RejectedError
	var nl *NotLeaderError
	var np *NotProposedError
	switch {
	case err == nil:
		return codeOK, index, data
	case errors.As(err, &rej):
		return codeRejected, rej.Index, []byte(rej.Err.Error())
	case errors.As(err, &nl):
		return codeNotLeader, 0, encodePair(nl.LeaderID, nl.LeaderAddr)
	case errors.Is(err, ErrMembership):
		return codeMembership, 0, []byte(err.Error())
	case errors.As(err, &np):
		return codeNotProposed, 0, np.Refusal
	case errors.Is(err, ErrPeerBudget):
		return codePeerBudget, 0, []byte(err.Error())
	case errors.Is(err, ErrNoLeader):
		return codeNoLeader, 0, nil
	case errors.Is(err, ErrTimeout):
		return codeTimeout, 0, nil
	case errors.Is(err, ErrOutcomeUnknown): // before ErrShutdown, which it may wrap
		return codeOutcomeUnknown, 0, nil
	case errors.Is(err, ErrShutdown):
		return codeShutdown, 0, nil
	default:
		return codeError, 0, []byte(err.Error())
	}
}

// decodeResult is the inverse of encodeResult, as seen by the caller.
func decodeResult(addr string, code byte, index uint64, body []byte) ([]byte, uint64, error) {
	switch code {
	case codeOK:
		return body, index, nil
	case codeRejected:
		return nil, index, &RejectedError{Index: index, Err: &RemoteError{Addr: addr, Msg: string(body)}}
	case codeNotLeader:
		id, a, err := decodePair(body)
		if err != nil {
			return nil, 0, &RemoteError{Addr: addr, Msg: "malformed not-leader response"}
		}
		return nil, 0, &NotLeaderError{LeaderID: id, LeaderAddr: a}
	case codeNoLeader:
		return nil, 0, ErrNoLeader
	case codeTimeout:
		return nil, 0, ErrTimeout
	case codeShutdown:
		return nil, 0, ErrShutdown
	case codeOutcomeUnknown:
		return nil, 0, ErrOutcomeUnknown
	case codeMembership:
		return nil, 0, &RemoteError{Addr: addr, Msg: string(body), Kind: ErrMembership}
	case codeNotProposed:
		return nil, 0, &NotProposedError{Refusal: body}
	case codePeerBudget:
		return nil, 0, &RemoteError{Addr: addr, Msg: string(body), Kind: ErrPeerBudget}
	default:
		return nil, 0, &RemoteError{Addr: addr, Msg: string(body)}
	}
}

// forwardServer serves forwarding connections from the listener.
func (n *Node) serveForward(conns <-chan net.Conn, closed <-chan struct{}) {
	defer n.wg.Done()
	for {
		select {
		case c := <-conns:
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				n.serveForwardConn(c)
			}()
		case <-closed:
			return
		}
	}
}

func (n *Node) serveForwardConn(c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(n.lifetime, func() { _ = c.Close() })
	defer stop()
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	fwdTimeout := n.cfg.forwardTimeout()
	for {
		// An idle connection waits for its next request without a
		// deadline; once a request begins, the rest must arrive in time.
		op, ms, body, err := readFrameThen(r, func() { _ = c.SetReadDeadline(time.Now().Add(fwdTimeout)) })
		if err != nil {
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		timeout := time.Duration(ms) * time.Millisecond
		if timeout <= 0 || timeout > n.cfg.applyTimeout() {
			timeout = n.cfg.applyTimeout()
		}
		ctx, cancel := context.WithTimeout(n.lifetime, timeout)
		data, index, err := n.serveOp(ctx, peerAuditor(c), op, body)
		cancel()
		code, idx, out := encodeResult(data, index, err)
		_ = c.SetWriteDeadline(time.Now().Add(fwdTimeout))
		if err := writeFrame(w, code, idx, out); err != nil {
			return
		}
		_ = c.SetWriteDeadline(time.Time{})
	}
}

// ErrMembership is matched when a peer asks to change the raft membership
// of another auditor than itself, or a removal's quorum signatures do not
// verify. An auditor joins or leaves the cluster only with its own
// certificate, or is removed on a majority of the other auditors'
// signatures: one auditor's certificate must not be able to add a voter or
// remove the others.
var ErrMembership = errors.New("auditor: an auditor may join or leave the cluster only for itself, or be removed on the signatures of a majority of the other auditors")

// peerAuditor returns the auditor id of the certificate a forwarding
// connection presented, or "" when it has none.
func peerAuditor(c net.Conn) string {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return ""
	}
	cs := tc.ConnectionState()
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	id, err := AuditorIDFromCert(cs.PeerCertificates[0])
	if err != nil {
		return ""
	}
	return id
}

// selfOnly refuses a membership change of id asked by peer unless they are
// the same auditor.
func selfOnly(peer, id, what string) error {
	if peer == "" || peer != id {
		return fmt.Errorf("%w: auditor %q asked to %s auditor %q", ErrMembership, peer, what, id)
	}
	return nil
}

func (n *Node) serveOp(ctx context.Context, peer string, op byte, body []byte) ([]byte, uint64, error) {
	switch op {
	case opSubmit:
		res, idx, err := n.applyLocal(ctx, peer, body)
		if errors.Is(err, raft.ErrNotLeader) {
			err = n.notLeader() // lost leadership before enqueueing
		}
		return res, idx, err
	case opJoin:
		id, addr, err := decodePair(body)
		if err != nil {
			return nil, 0, err
		}
		if err := selfOnly(peer, id, "add"); err != nil {
			return nil, 0, err
		}
		return nil, 0, n.joinLocal(ctx, id, addr)
	case opRemove:
		if err := selfOnly(peer, string(body), "remove"); err != nil {
			return nil, 0, err
		}
		return nil, 0, n.removeLocal(ctx, string(body))
	case opRemoveSigned:
		id, proof, err := decodePair(body)
		if err != nil {
			return nil, 0, err
		}
		if err := n.verifyRemoval(id, []byte(proof)); err != nil {
			return nil, 0, err
		}
		return nil, 0, n.removeLocal(ctx, id)
	case opCheckpoint:
		cp, err := n.peerCheckpoint(ctx, body)
		return cp, 0, err
	case opEntries:
		es, err := n.localEntries(body)
		return es, 0, err
	default:
		return nil, 0, fmt.Errorf("unknown forwarding operation %d", op)
	}
}

// Forward submits cmd once to the auditor at addr over the forwarding
// channel, as the auditor whose certificate client carries, the way a
// follower's Node.Submit hands a command to its leader. It follows no
// redirect: a follower answers a *NotLeaderError. The leader treats cmd as
// any forwarded command — the sender's byte budget (ErrPeerBudget), then
// Config.Screen (a *NotProposedError) — and otherwise answers as Submit.
func Forward(ctx context.Context, addr string, client *tls.Config, cmd []byte) ([]byte, uint64, error) {
	fc := &forwardClient{tls: clientTLS(client), idle: map[string][]*fwdConn{}}
	defer fc.close()
	return fc.call(ctx, addr, opSubmit, cmd)
}

// forwardClient keeps idle mutual-TLS connections to other auditors.
type forwardClient struct {
	tls *tls.Config
	// dials counts the connections dialled, failed attempts included: each
	// costs a mutual-TLS handshake on both sides, so it should grow with
	// peers, not requests.
	dials, dialsFailed atomic.Int64
	// dropped counts the connections closed because a call on them failed
	// or ended before its answer (each later costs a dial); abandoned
	// counts those of them whose caller cancelled the call rather than
	// ran out of time.
	dropped, abandoned atomic.Int64
	// inFlight counts the calls under way.
	inFlight atomic.Int64

	mu     sync.Mutex
	idle   map[string][]*fwdConn
	closed bool
}

type fwdConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// errNotSent marks a failure before the request left this node: retrying
// it cannot apply a command twice.
type errNotSent struct{ err error }

func (e errNotSent) Error() string { return e.err.Error() }
func (e errNotSent) Unwrap() error { return e.err }

func (fc *forwardClient) get(ctx context.Context, addr string) (*fwdConn, error) {
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		return nil, ErrShutdown
	}
	if l := fc.idle[addr]; len(l) > 0 {
		c := l[len(l)-1]
		fc.idle[addr] = l[:len(l)-1]
		fc.mu.Unlock()
		return c, nil
	}
	fc.mu.Unlock()
	fc.dials.Add(1)
	c, err := dialChannel(ctx, addr, fc.tls, chanForward)
	if err != nil {
		fc.dialsFailed.Add(1)
		if ctx.Err() != nil {
			return nil, err // out of time, which says nothing of the peer
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrPeerUnreachable, addr, err)
	}
	return &fwdConn{c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}, nil
}

func (fc *forwardClient) put(addr string, c *fwdConn) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.closed || len(fc.idle[addr]) >= maxIdlePerPeer {
		_ = c.c.Close()
		return
	}
	fc.idle[addr] = append(fc.idle[addr], c)
}

// drop closes a connection whose call on ctx failed or ended early.
func (fc *forwardClient) drop(ctx context.Context, c *fwdConn) {
	_ = c.c.Close()
	fc.dropped.Add(1)
	if errors.Is(ctx.Err(), context.Canceled) {
		fc.abandoned.Add(1)
	}
}

func (fc *forwardClient) close() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.closed = true
	for _, l := range fc.idle {
		for _, c := range l {
			_ = c.c.Close()
		}
	}
	fc.idle = nil
}

// call sends one request to addr. A connection error before the request is
// written is returned as errNotSent; after it, as ErrOutcomeUnknown for a
// submit (the leader may have committed it).
func (fc *forwardClient) call(ctx context.Context, addr string, op byte, body []byte) ([]byte, uint64, error) {
	fc.inFlight.Add(1)
	defer fc.inFlight.Add(-1)
	c, err := fc.get(ctx, addr)
	if err != nil {
		return nil, 0, errNotSent{err}
	}
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Now()) })
	defer stop()
	var ms uint64
	if dl, ok := ctx.Deadline(); ok {
		ms = uint64(max(time.Until(dl).Milliseconds(), 1))
	}
	if err := writeFrame(c.w, op, ms, body); err != nil {
		fc.drop(ctx, c)
		return nil, 0, errNotSent{err}
	}
	code, idx, out, err := readFrame(c.r)
	if err != nil {
		fc.drop(ctx, c)
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
		}
		return nil, 0, fmt.Errorf("%w: connection to %s: %v", ErrOutcomeUnknown, addr, err)
	}
	if !stop() {
		// The deadline fired after the response arrived; the connection's
		// deadline is now in the past, so do not reuse it.
		fc.drop(ctx, c)
	} else {
		fc.put(addr, c)
	}
	return decodeResult(addr, code, idx, out)
}
