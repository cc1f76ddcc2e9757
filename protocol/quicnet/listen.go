package quicnet

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/nzcfed/nzc/crypto"
)

// welcome is what a listener sends, on a unidirectional stream, to a peer
// it has accepted. In TLS 1.3 a client finishes its handshake before the
// server has checked the client's certificate, so a dialler waits for this
// byte to know it was accepted, and otherwise reports why it was not.
const welcome = 0x01

// Listener accepts authenticated connections.
type Listener struct {
	udp   *net.UDPConn
	tr    *quic.Transport
	ql    *quic.Listener
	cfg   Config
	roles []crypto.Role

	mu     sync.Mutex
	conns  map[*Conn]struct{}
	closed bool
}

// Listen listens on a UDP address (host:port; port 0 picks a free one).
// Only parties with one of the given roles may connect (any party of the
// federation when none is given); others are refused with a readable
// reason, logged, and reported to cfg.OnReject.
func Listen(addr string, cfg Config, roles ...crypto.Role) (*Listener, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	l := &Listener{cfg: cfg, roles: roles, conns: map[*Conn]struct{}{}}
	base := cfg.baseTLS()
	base.ClientAuth = tls.RequireAnyClientCert
	tlsConf := base.Clone()
	tlsConf.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		var remote net.Addr
		if hello.Conn != nil {
			remote = hello.Conn.RemoteAddr()
		}
		var failed atomic.Pointer[error]
		c := base.Clone()
		verify := cfg.verifier(crypto.UsageClient, nil, &failed)
		c.VerifyPeerCertificate = func(raw [][]byte, chains [][]*x509.Certificate) error {
			err := verify(raw, chains)
			if err != nil {
				l.reject(remote, err)
			}
			return err
		}
		return c, nil
	}
	// The listener owns its socket, so that Close releases the port at
	// once and a restarted party can bind it again.
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	tr := &quic.Transport{Conn: udp, StatelessResetKey: resetKey(cfg.Credential)}
	ql, err := tr.Listen(tlsConf, cfg.quicConfig(true))
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	l.udp, l.tr, l.ql = udp, tr, ql
	return l, nil
}

// resetKey derives the listener's stateless reset key from its party's
// private key. A party that restarts after a crash (kill -9, power loss)
// then answers its peers' packets for connections of its earlier run with
// a stateless reset, which closes them at once; with a random key they
// would hang until their idle timeout. The key is secret as long as the
// private key is.
func resetKey(c *crypto.Credential) *quic.StatelessResetKey {
	h := sha256.New()
	h.Write([]byte("nzc quic stateless reset key v1\x00"))
	h.Write(c.Key.Seed())
	var k quic.StatelessResetKey
	copy(k[:], h.Sum(nil))
	return &k
}

func (l *Listener) reject(remote net.Addr, err error) {
	l.cfg.logger().Warn("refused connection", "remote", addrString(remote), "err", err)
	if l.cfg.OnReject != nil {
		l.cfg.OnReject(remote, err)
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return "unknown"
	}
	return a.String()
}

// Addr is the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.ql.Addr() }

// Accept waits for the next party that completes the handshake with a
// federation certificate of an allowed role.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	for {
		qc, err := l.ql.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, fmt.Errorf("accept: %w", err)
		}
		c, err := l.setup(qc)
		if err != nil {
			return nil, err
		}
		if c != nil {
			return c, nil
		}
	}
}

// setup checks a new connection's role and the limit of connections per
// party, then welcomes the party. It returns nil for a refused connection
// (closed, with the reason) and an error only when the listener is closed.
func (l *Listener) setup(qc *quic.Conn) (*Conn, error) {
	c, err := newConn(qc, &l.cfg)
	if err == nil && len(l.roles) > 0 {
		err = c.peer.Expect(l.roles...)
	}
	if err != nil {
		l.reject(qc.RemoteAddr(), err)
		_ = qc.CloseWithError(codeRejected, err.Error())
		return nil, nil
	}
	if err := l.track(c); err != nil {
		if errors.Is(err, net.ErrClosed) {
			_ = qc.CloseWithError(codeClosed, "listener closed")
			return nil, fmt.Errorf("accept: %w", err)
		}
		l.reject(qc.RemoteAddr(), err)
		_ = qc.CloseWithError(codeRejected, err.Error())
		return nil, nil
	}
	if err := sendWelcome(qc, orDefault(l.cfg.HandshakeTimeout, DefaultHandshakeTimeout)); err != nil {
		c.log.Debug("connection closed during setup", "err", err)
		_ = qc.CloseWithError(codeClosed, "setup failed")
		return nil, nil
	}
	c.log.Info("accepted connection")
	return c, nil
}

// Serve accepts parties until ctx ends (then it returns nil) and serves
// each connection's requests with mux; log (the connection's own logger
// when nil) hears when a connection ends. Each new connection is set up
// (checked and welcomed) on its own goroutine, so a slow peer does not
// hold up the next.
func (l *Listener) Serve(ctx context.Context, mux Mux, log *slog.Logger) error {
	for {
		qc, err := l.ql.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		go func() {
			c, err := l.setup(qc)
			if c == nil || err != nil {
				return
			}
			if err := c.Serve(ctx, mux); err != nil {
				log := cmp.Or(log, c.log)
				log.Debug("connection ended", "peer", c.Peer().String(), "err", err)
			}
		}()
	}
}

func sendWelcome(qc *quic.Conn, timeout time.Duration) error {
	s, err := qc.OpenUniStream()
	if err != nil {
		return err
	}
	_ = s.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := s.Write([]byte{welcome}); err != nil {
		return err
	}
	return s.Close()
}

// TooManyConnsError refuses a party that already has the most connections
// a listener keeps from one party.
type TooManyConnsError struct {
	Peer crypto.Peer
	Max  int
}

func (e *TooManyConnsError) Error() string {
	return fmt.Sprintf("%s already has %d connections open here, the most allowed: close one (or wait for a dead one to time out)", e.Peer, e.Max)
}

// track records an accepted connection until it closes; it refuses one
// more than MaxConnsPerPeer from the same party, and any once the
// listener is closed (net.ErrClosed).
func (l *Listener) track(c *Conn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return net.ErrClosed
	}
	max, n := orDefaultInt(l.cfg.MaxConnsPerPeer, DefaultMaxConnsPerPeer), 0
	for o := range l.conns {
		if o.peer == c.peer {
			n++
		}
	}
	if n >= max {
		return &TooManyConnsError{Peer: c.peer, Max: max}
	}
	l.conns[c] = struct{}{}
	context.AfterFunc(c.qc.Context(), func() {
		l.mu.Lock()
		delete(l.conns, c)
		l.mu.Unlock()
	})
	return nil
}

// Close stops listening and closes every connection the listener accepted.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	conns := make([]*Conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.qc.CloseWithError(codeClosed, "server shutting down")
	}
	return errors.Join(l.ql.Close(), l.tr.Close(), l.udp.Close())
}
