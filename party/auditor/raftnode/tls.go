package raftnode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	nzcrypto "github.com/nzcfed/nzc/crypto"
)

// The auditor listens on one TCP port with mutual TLS. After the handshake
// the dialer sends one byte that names the channel: raft traffic (handed to
// raft's NetworkTransport) or the forwarding RPC (submit/join/remove sent by
// a follower to the leader).
const (
	chanRaft    byte = 'R'
	chanForward byte = 'F'
)

// handshakeTimeout bounds the TLS handshake and the channel byte.
const handshakeTimeout = 10 * time.Second

// AuditorIDFromCert returns <id> from the certificate's single URI SAN
// nzc://auditor/<id> (parsed by the federation's crypto package), or an
// error matching ErrNotAuditor.
func AuditorIDFromCert(cert *x509.Certificate) (string, error) {
	p, err := nzcrypto.PeerFromCert(cert)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNotAuditor, err)
	}
	if err := p.Expect(nzcrypto.RoleAuditor); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNotAuditor, err)
	}
	return p.ID, nil
}

// verifyAuditorRole checks the verified peer leaf carries the auditor role.
func verifyAuditorRole(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: no certificate presented", ErrNotAuditor)
	}
	_, err := AuditorIDFromCert(cs.PeerCertificates[0])
	return err
}

// serverTLS returns a copy of c that also requires the client to be an
// auditor.
func serverTLS(c *tls.Config) *tls.Config {
	s := c.Clone()
	prev := s.VerifyConnection
	s.VerifyConnection = func(cs tls.ConnectionState) error {
		if prev != nil {
			if err := prev(cs); err != nil {
				return err
			}
		}
		return verifyAuditorRole(cs)
	}
	return s
}

// clientTLS returns a copy of c that verifies the server by its chain to
// c.RootCAs and its auditor URI SAN rather than by host name: auditor
// certificates name the party, not the address it happens to run on.
func clientTLS(c *tls.Config) *tls.Config {
	s := c.Clone()
	roots := s.RootCAs
	prev := s.VerifyConnection
	s.InsecureSkipVerify = true // replaced by the chain check below
	s.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("%w: no certificate presented", ErrNotAuditor)
		}
		inter := x509.NewCertPool()
		for _, ic := range cs.PeerCertificates[1:] {
			inter.AddCert(ic)
		}
		if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
			Roots:         roots,
			Intermediates: inter,
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			return fmt.Errorf("auditor: peer certificate is not issued by the federation CA: %w", err)
		}
		if prev != nil {
			if err := prev(cs); err != nil {
				return err
			}
		}
		return verifyAuditorRole(cs)
	}
	return s
}

// muxListener accepts mutual-TLS connections and sorts them by channel byte.
type muxListener struct {
	ln        net.Listener
	advertise net.Addr
	log       *slog.Logger

	raftConns chan net.Conn
	fwdConns  chan net.Conn

	closeOnce sync.Once
	closed    chan struct{}
	wg        sync.WaitGroup

	// raft's NetworkTransport neither closes the connections it accepted
	// nor its pool of dialled ones when it closes: a peer's pooled
	// connection would keep this node's handler goroutine blocked in a
	// read after shutdown. The listener closes every raft connection it
	// handed out, in either direction, when it closes.
	mu    sync.Mutex
	conns map[*trackedConn]struct{}

	// peers is the raft configuration: a dialled raft peer must present
	// the certificate of the id it gives the address.
	peers *raftPeers
	// refused counts raft connections closed because an RPC spoke for a
	// server other than the connection's certificate.
	refused atomic.Uint64
}

// trackedConn is a raft connection the listener closes when it closes. A
// read cut short by that close reports io.EOF, the end raft expects of a
// peer, rather than an error it would log.
type trackedConn struct {
	net.Conn
	m    *muxListener
	once sync.Once
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.m.isClosed() {
		err = io.EOF
	}
	return n, err
}

func (c *trackedConn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		c.m.mu.Lock()
		delete(c.m.conns, c)
		c.m.mu.Unlock()
		err = c.Conn.Close()
	})
	return err
}

// track wraps c so that closing the listener closes it; after the close it
// closes c at once and returns an error.
func (m *muxListener) track(c net.Conn) (net.Conn, error) {
	tc := &trackedConn{Conn: c, m: m}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.isClosed() {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	m.conns[tc] = struct{}{}
	return tc, nil
}

func (m *muxListener) isClosed() bool {
	select {
	case <-m.closed:
		return true
	default:
		return false
	}
}

func newMuxListener(bind string, advertise net.Addr, serverConf *tls.Config, log *slog.Logger) (*muxListener, error) {
	ln, err := tls.Listen("tcp", bind, serverTLS(serverConf))
	if err != nil {
		return nil, fmt.Errorf("auditor: listen on %s: %w", bind, err)
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	m := &muxListener{
		ln:        ln,
		advertise: advertise,
		log:       log,
		raftConns: make(chan net.Conn),
		fwdConns:  make(chan net.Conn),
		closed:    make(chan struct{}),
		conns:     map[*trackedConn]struct{}{},
		peers:     &raftPeers{},
	}
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

func (m *muxListener) acceptLoop() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.log.Warn("accept failed", "error", err)
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(c)
		}()
	}
}

func (m *muxListener) route(c net.Conn) {
	tc := c.(*tls.Conn)
	_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		m.log.Warn("rejected peer connection", "remote", c.RemoteAddr().String(), "error", err)
		_ = c.Close()
		return
	}
	var b [1]byte
	if _, err := io.ReadFull(tc, b[:]); err != nil {
		_ = c.Close()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	var ch chan net.Conn
	switch b[0] {
	case chanRaft:
		// The handshake verified an auditor certificate.
		peer, _ := AuditorIDFromCert(tc.ConnectionState().PeerCertificates[0])
		tc, err := m.track(m.guard(c, peer))
		if err != nil {
			return
		}
		c, ch = tc, m.raftConns
	case chanForward:
		ch = m.fwdConns
	default:
		m.log.Warn("unknown channel from peer", "remote", c.RemoteAddr().String(), "channel", b[0])
		_ = c.Close()
		return
	}
	select {
	case ch <- c:
	case <-m.closed:
		_ = c.Close()
	}
}

func (m *muxListener) Close() error {
	var err error
	m.closeOnce.Do(func() {
		m.mu.Lock()
		close(m.closed)
		conns := make([]*trackedConn, 0, len(m.conns))
		for c := range m.conns {
			conns = append(conns, c)
		}
		m.mu.Unlock()
		err = m.ln.Close()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return err
}

// wait returns when every accept goroutine has ended.
func (m *muxListener) wait() { m.wg.Wait() }

// streamLayer is the raft.StreamLayer: the raft channel of the listener and
// a mutual-TLS dialer that opens the raft channel.
type streamLayer struct {
	m      *muxListener
	client *tls.Config
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func (s *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.m.raftConns:
		return c, nil
	case <-s.m.closed:
		return nil, net.ErrClosed
	}
}

func (s *streamLayer) Close() error   { return s.m.Close() }
func (s *streamLayer) Addr() net.Addr { return s.m.advertise }

// Dial opens the raft channel to addr, which must present the certificate
// of the server the raft configuration places at addr: raft names only the
// address to the stream layer, so the configuration supplies the id.
func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	want, ok := s.m.peers.idAt(string(addr))
	if !ok {
		return nil, fmt.Errorf("%w: no server at %s in the raft configuration", ErrWrongPeer, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := dialChannel(ctx, string(addr), s.client, chanRaft)
	if err != nil {
		return nil, err
	}
	// dialChannel checked the certificate is a federation auditor's.
	got, _ := AuditorIDFromCert(c.(*tls.Conn).ConnectionState().PeerCertificates[0])
	if got != want {
		_ = c.Close()
		s.m.refused.Add(1)
		s.m.log.Warn("refused a raft peer presenting another server's certificate", "addr", string(addr), "want", want, "certificate", got)
		return nil, fmt.Errorf("%w: %s is %q in the raft configuration but presents the certificate of %q", ErrWrongPeer, addr, want, got)
	}
	return s.m.track(c)
}

// dialChannel opens a mutual-TLS connection to addr, checks the server is an
// auditor, and selects the channel.
func dialChannel(ctx context.Context, addr string, client *tls.Config, ch byte) (net.Conn, error) {
	d := &tls.Dialer{Config: client}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetWriteDeadline(dl)
	}
	if _, err := c.Write([]byte{ch}); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}
