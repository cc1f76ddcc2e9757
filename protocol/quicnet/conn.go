package quicnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// QUIC error codes of this protocol.
const (
	codeClosed    quic.ApplicationErrorCode = 0 // orderly close
	codeRejected  quic.ApplicationErrorCode = 1 // the listener refused the peer's role
	codeCancelled quic.StreamErrorCode      = 1 // the requester gave up
	codeRefused   quic.StreamErrorCode      = 2 // the responder will not read the rest
)

// Conn is an authenticated connection to one party. Both sides may call and
// serve. It is safe for concurrent use.
type Conn struct {
	qc      *quic.Conn
	peer    crypto.Peer
	maxBody int
	readTO  time.Duration
	writeTO time.Duration
	// inflight is the bytes of request bodies being read or handled, at
	// most maxInflight.
	inflightMu  sync.Mutex
	inflight    int
	maxInflight int
	log         *slog.Logger
	// readers pools the frame readers of incoming requests, so that
	// request bodies reuse buffers instead of allocating each time.
	readers sync.Pool
}

// maxPooledBuf bounds the buffers kept between requests.
const maxPooledBuf = 4 << 20

func (c *Conn) reader(s *quic.Stream) *protocol.FrameReader {
	if fr, ok := c.readers.Get().(*protocol.FrameReader); ok {
		fr.Reset(s)
		return fr
	}
	return protocol.NewFrameReader(s, c.maxBody)
}

func (c *Conn) release(fr *protocol.FrameReader) {
	fr.Reset(nil)
	if fr.BufferCap() <= maxPooledBuf {
		c.readers.Put(fr)
	}
}

func newConn(qc *quic.Conn, cfg *Config) (*Conn, error) {
	certs := qc.ConnectionState().TLS.PeerCertificates
	if len(certs) == 0 {
		return nil, errors.New("quicnet: peer presented no certificate")
	}
	peer, err := crypto.PeerFromCert(certs[0]) // verified during the handshake
	if err != nil {
		return nil, err
	}
	return &Conn{qc: qc, peer: peer, maxBody: cfg.maxBody(), readTO: orDefault(cfg.ReadTimeout, DefaultReadTimeout),
		writeTO: orDefault(cfg.WriteTimeout, DefaultWriteTimeout), maxInflight: orDefaultInt(cfg.MaxInflight, DefaultMaxInflight),
		log: cfg.logger().With("peer", peer.String(), "remote", qc.RemoteAddr().String())}, nil
}

// Peer is the party at the other end, as named by its verified certificate.
func (c *Conn) Peer() crypto.Peer { return c.peer }

// RemoteAddr is the peer's network address.
func (c *Conn) RemoteAddr() net.Addr { return c.qc.RemoteAddr() }

// LocalAddr is this side's network address.
func (c *Conn) LocalAddr() net.Addr { return c.qc.LocalAddr() }

// Done is closed when the connection is closed, by either side or by a
// timeout; Err then says why.
func (c *Conn) Done() <-chan struct{} { return c.qc.Context().Done() }

// Context is done when the connection is closed, for context.AfterFunc.
func (c *Conn) Context() context.Context { return c.qc.Context() }

// Err returns why the connection closed, or nil while it is open.
func (c *Conn) Err() error {
	if c.qc.Context().Err() == nil {
		return nil
	}
	return context.Cause(c.qc.Context())
}

// Close closes the connection; calls in flight on either side fail.
func (c *Conn) Close() error {
	return c.qc.CloseWithError(codeClosed, "closed")
}

// Call sends one request and returns the response frame. If the peer
// answers with an Error frame, Call returns a *protocol.Error (match it
// with errors.Is(err, protocol.ErrBudgetExhausted), …). ctx bounds the
// whole exchange; when it ends the stream is abandoned and ctx's error is
// returned.
func (c *Conn) Call(ctx context.Context, t protocol.MsgType, body []byte) (protocol.MsgType, []byte, error) {
	return c.CallParts(ctx, t, body)
}

// CallParts is Call with the request's body in parts, sent one after the
// other as one frame without copying them together: for a body most of
// which is sent to several peers at once. The parts are read, never
// changed, until CallParts returns.
func (c *Conn) CallParts(ctx context.Context, t protocol.MsgType, parts ...[]byte) (protocol.MsgType, []byte, error) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > c.maxBody {
		return 0, nil, &protocol.FrameTooLargeError{Type: t, Length: uint64(n), Max: c.maxBody}
	}
	s, err := c.qc.OpenStreamSync(ctx)
	if err != nil {
		return 0, nil, c.callErr(ctx, t, err)
	}
	stop := context.AfterFunc(ctx, func() {
		s.CancelWrite(codeCancelled)
		s.CancelRead(codeCancelled)
	})
	defer stop()
	if d, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(d)
	} else {
		_ = s.SetWriteDeadline(time.Now().Add(c.writeTO))
	}
	werr := protocol.NewFrameWriter(s, c.maxBody).WriteFrameParts(t, parts...)
	if werr == nil {
		werr = s.Close()
	}
	// Read the answer even when writing failed: a peer that refuses a
	// request (too large, say) answers and stops reading.
	rt, rbody, rerr := protocol.NewFrameReader(s, c.maxBody).Next()
	if rerr != nil {
		s.CancelRead(codeCancelled)
		if werr != nil {
			return 0, nil, c.callErr(ctx, t, werr)
		}
		return 0, nil, c.callErr(ctx, t, rerr)
	}
	s.CancelRead(codeRefused) // one frame only: ignore anything after it
	if rt == protocol.TypeError {
		var e nzcpb.Error
		if err := protocol.DecodeInto(rt, rbody, &e); err != nil {
			return 0, nil, fmt.Errorf("%s call to %s: undecodable error answer: %w", t, c.peer, err)
		}
		return 0, nil, protocol.FromWire(&e)
	}
	return rt, rbody, nil
}

func (c *Conn) callErr(ctx context.Context, t protocol.MsgType, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s call to %s: %w", t, c.peer, context.Cause(ctx))
	}
	if cerr := c.Err(); cerr != nil {
		return fmt.Errorf("%s call to %s: connection closed: %w", t, c.peer, cerr)
	}
	return fmt.Errorf("%s call to %s: %w", t, c.peer, err)
}

// RawStream opens a request stream and hands it over without framing or
// deadlines: for load tests and tools that play a peer misbehaving below
// the frame layer (a request left half sent, a header that lies). The
// caller closes it.
func (c *Conn) RawStream(ctx context.Context) (io.ReadWriteCloser, error) {
	s, err := c.qc.OpenStreamSync(ctx)
	if err != nil {
		return nil, c.callErr(ctx, 0, err)
	}
	return rawStream{s}, nil
}

// rawStream closes both directions of a stream on Close.
type rawStream struct{ *quic.Stream }

func (s rawStream) Close() error {
	s.CancelRead(codeCancelled)
	return s.Stream.Close()
}

// Invoke sends req and decodes the response into resp, checking that the
// response has resp's type and is valid.
func (c *Conn) Invoke(ctx context.Context, req, resp proto.Message) error {
	t, err := protocol.TypeOf(req)
	if err != nil {
		return err
	}
	body, err := protocol.Marshal(req)
	if err != nil {
		return err
	}
	rt, rbody, err := c.Call(ctx, t, body)
	if err != nil {
		return err
	}
	if err := protocol.DecodeInto(rt, rbody, resp); err != nil {
		return fmt.Errorf("%s call to %s: %w", t, c.peer, err)
	}
	return nil
}

// Request is an incoming request as seen by a handler.
type Request struct {
	// Peer is the caller, from its verified certificate.
	Peer crypto.Peer
	Type protocol.MsgType
	// Body is valid until the handler returns.
	Body []byte
	// Conn is the connection the request came on, so that a handler may
	// keep it to call the peer later (the aggregator keeps hospitals').
	Conn *Conn
}

// Decode decodes and validates the body into m; its errors become
// bad-request answers.
func (r *Request) Decode(m proto.Message) error { return protocol.DecodeInto(r.Type, r.Body, m) }

// HandlerFunc answers a request with a response frame, or with an error
// that is sent as an Error frame (see protocol.ToWire: a *protocol.Error
// keeps its code and text, other errors become internal and are logged
// here, not sent).
type HandlerFunc func(ctx context.Context, req *Request) (protocol.MsgType, []byte, error)

// Reply encodes m as a handler's response.
func Reply(m proto.Message) (protocol.MsgType, []byte, error) {
	t, err := protocol.TypeOf(m)
	if err != nil {
		return 0, nil, err
	}
	body, err := protocol.Marshal(m)
	return t, body, err
}

// Route says who may send a request type and how it is answered.
type Route struct {
	// Roles that may send this request. Empty means nobody: a route must
	// name its callers.
	Roles  []crypto.Role
	Handle HandlerFunc
}

// Mux maps request types to routes. A request of a type without a route
// is answered unknown-type; one from a role the route does not name is
// answered unauthorized, and its handler does not run.
type Mux map[protocol.MsgType]Route

// Serve answers the peer's requests until ctx ends or the connection
// closes, each on its own goroutine, and returns after every handler has
// returned. It returns nil when ctx ended, otherwise why the connection
// closed.
func (c *Conn) Serve(ctx context.Context, mux Mux) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		s, err := c.qc.AcceptStream(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if cerr := c.Err(); cerr != nil {
				return cerr
			}
			return err
		}
		wg.Go(func() { c.handle(ctx, s, mux) })
	}
}

func (c *Conn) handle(ctx context.Context, s *quic.Stream, mux Mux) {
	defer s.CancelRead(codeRefused) // no-op once the request was read whole
	fr := c.reader(s)
	defer c.release(fr) // after the response is written: the body is in its buffer
	// The handler's context ends when Serve's does or when the caller
	// abandons the request (it cancels its read side, which closes ours).
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.Context(), cancel)
	defer stop()

	_ = s.SetReadDeadline(time.Now().Add(c.readTO))
	// The header says what the request is and how long: a request this
	// peer may not send, or one the connection has no room for, is refused
	// before its body is read.
	t, n, err := fr.Header()
	var route Route
	if err == nil {
		route, err = c.route(mux, t)
	}
	if err == nil {
		var release func()
		if release, err = c.reserve(n); err == nil {
			defer release()
		}
	}
	var body []byte
	if err == nil {
		body, err = fr.Body(n)
	}
	var rt protocol.MsgType
	var rbody []byte
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.log.Warn("request did not arrive in time", "timeout", c.readTO)
		err = protocol.Errorf(protocol.CodeBadRequest, "the request did not arrive whole within %s", c.readTO)
	case err != nil:
		var pe *protocol.Error
		if errors.As(err, &pe) {
			break // refused from the header, before the body
		}
		if !errors.Is(err, protocol.ErrFrameTooLarge) && !errors.Is(err, protocol.ErrUnknownType) &&
			!errors.Is(err, protocol.ErrMalformedHeader) && !errors.Is(err, protocol.ErrTruncated) {
			c.log.Debug("request stream failed before a frame arrived", "err", err)
			s.CancelWrite(codeRefused)
			return
		}
		c.log.Warn("refused malformed request", "err", err)
	default:
		rt, rbody, err = c.dispatchSafe(hctx, route, t, body)
	}
	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) && !errors.Is(err, protocol.ErrBadMessage) {
			c.log.Error("request failed", "type", t.String(), "err", err)
		}
		rt = protocol.TypeError
		rbody, err = protocol.Marshal(protocol.ToWire(err))
		if err != nil {
			s.CancelWrite(codeRefused)
			return
		}
	}
	_ = s.SetWriteDeadline(time.Now().Add(c.writeTO))
	if err := protocol.NewFrameWriter(s, c.maxBody).WriteFrame(rt, rbody); err != nil {
		c.log.Warn("could not send response", "type", rt.String(), "err", err)
		if errors.Is(err, protocol.ErrFrameTooLarge) || errors.Is(err, protocol.ErrUnknownType) {
			e, _ := protocol.Marshal(protocol.ToWire(protocol.Errorf(protocol.CodeInternal, "the response did not fit in a frame")))
			_ = protocol.NewFrameWriter(s, c.maxBody).WriteFrame(protocol.TypeError, e)
		}
	}
	_ = s.Close()
}

// dispatchSafe turns a handler's panic into an internal error answer, so
// that one bad request cannot take the party down.
func (c *Conn) dispatchSafe(ctx context.Context, route Route, t protocol.MsgType, body []byte) (rt protocol.MsgType, rbody []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("handler panicked", "type", t.String(), "panic", p, "stack", string(debug.Stack()))
			rt, rbody, err = 0, nil, fmt.Errorf("handler for %s panicked: %v", t, p)
		}
	}()
	return route.Handle(ctx, &Request{Peer: c.peer, Type: t, Body: body, Conn: c})
}

// route returns the route of a request type, or the refusal of a type
// without one or of a peer whose role may not send it.
func (c *Conn) route(mux Mux, t protocol.MsgType) (Route, error) {
	route, ok := mux[t]
	if !ok || route.Handle == nil {
		return Route{}, protocol.Errorf(protocol.CodeUnknownType, "this party does not serve %s requests", t)
	}
	if !slices.Contains(route.Roles, c.peer.Role) {
		err := c.peer.Expect(route.Roles...)
		if len(route.Roles) == 0 {
			err = fmt.Errorf("no role may send %s requests here", t)
		}
		c.log.Warn("refused request from a role not allowed to send it", "type", t.String(), "err", err)
		return Route{}, protocol.Errorf(protocol.CodeUnauthorized, "%s", err.Error())
	}
	return route, nil
}

// reserve takes n bytes of the connection's budget for request bodies
// being read or handled; release returns them. A request that does not
// fit is refused at once (unavailable), so one peer's requests hold at most
// maxInflight bytes of this party's memory per connection.
func (c *Conn) reserve(n int) (release func(), err error) {
	c.inflightMu.Lock()
	defer c.inflightMu.Unlock()
	if c.inflight+n > c.maxInflight {
		return nil, &protocol.Error{Code: protocol.CodeUnavailable, RetryAfter: time.Second,
			Message: fmt.Sprintf("this connection already has %d bytes of requests in flight and the limit is %d: wait for answers before sending more", c.inflight, c.maxInflight)}
	}
	c.inflight += n
	return func() {
		c.inflightMu.Lock()
		c.inflight -= n
		c.inflightMu.Unlock()
	}, nil
}
