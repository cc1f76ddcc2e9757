// Package quicnet carries protocol frames over QUIC with mutual TLS. It is
// the only package of the module that imports quic-go.
//
// Every party holds a certificate from the federation CA naming its role
// and id (see package crypto). Only such certificates are accepted, over
// TLS 1.3 with ALPN "nzc/1"; the peer's identity is taken from its verified
// certificate and handed to every handler.
//
// A connection is symmetric: after the handshake either side may open
// request streams with [Conn.Call] and answer the other's with
// [Conn.Serve]. Hospitals dial out to the aggregator and never listen, yet
// the aggregator sends them query batches over that same connection. Each
// request has its own bidirectional stream: one request frame, one response
// frame, which is either the response or a typed Error frame.
package quicnet

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/protocol"
)

// ALPN is the application protocol negotiated in the TLS handshake.
const ALPN = "nzc/1"

// Defaults of Config.
const (
	// A party that vanishes (killed, cut off) is noticed by its peers
	// within DefaultIdleTimeout; keep-alives every DefaultKeepAlive give a
	// live peer five chances to answer in that time.
	DefaultKeepAlive        = 2 * time.Second
	DefaultIdleTimeout      = 10 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultReadTimeout      = time.Minute
	DefaultWriteTimeout     = time.Minute
	// DefaultMaxStreams bounds the requests one peer may have open on a
	// connection at once (a student's window is at most 16).
	DefaultMaxStreams = 32
	// DefaultMaxInflight bounds the bytes of request bodies one connection
	// may have being read or handled at once: two of the largest frames.
	DefaultMaxInflight = 2 * protocol.DefaultMaxBody
	// DefaultMaxConnsPerPeer bounds the connections a listener keeps from
	// one party (a restarted party's old connection lingers until it is
	// reset or times out).
	DefaultMaxConnsPerPeer = 4
	// Flow-control windows: what one stream, and one connection in all,
	// may have in flight unread. They bound the memory a peer can make a
	// connection buffer (quic-go's own maxima are 6 and 15 MiB, with 100
	// streams) while leaving a 150 ms path room for tens of MB/s.
	maxStreamWindow = 4 << 20
	maxConnWindow   = 16 << 20
)

// Config is what a party needs to speak to the federation.
type Config struct {
	// CA is the federation CA certificate; only certificates it issued are
	// accepted.
	CA *x509.Certificate
	// Credential is this party's certificate and key.
	Credential *crypto.Credential
	// MaxBody bounds every frame body read or written; ≤ 0 means
	// protocol.DefaultMaxBody.
	MaxBody int
	// KeepAlive is how often an idle connection is pinged (default 2s);
	// IdleTimeout closes a connection that hears nothing for that long
	// (default 10s); HandshakeTimeout bounds connection setup (default 10s).
	KeepAlive        time.Duration
	IdleTimeout      time.Duration
	HandshakeTimeout time.Duration
	// ReadTimeout bounds how long a served request may take to arrive
	// whole (default 1 minute), so that streams opened and left silent do
	// not hold the server's goroutines.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one response or request (default 1
	// minute), so that a peer that stops reading does not hold a
	// goroutine for ever.
	WriteTimeout time.Duration
	// MaxStreams bounds the requests a peer may have open at once on one
	// connection (default DefaultMaxStreams); MaxConnsPerPeer bounds the
	// connections a listener accepts from one party (default
	// DefaultMaxConnsPerPeer): one more is refused.
	MaxStreams      int
	MaxConnsPerPeer int
	// MaxInflight bounds the bytes of request bodies a connection may have
	// being read or handled at once (default DefaultMaxInflight); a request
	// over it is refused with unavailable before its body is read. With
	// MaxConnsPerPeer it bounds the memory one party's requests hold.
	MaxInflight int
	// Now is the clock used to check certificate validity; nil means
	// time.Now.
	Now func() time.Time
	// Logger receives connection events; nil means discard.
	Logger *slog.Logger
	// OnReject, when set, is told about every connection refused by a
	// listener, with the typed reason (a *crypto.PeerCertError or a
	// *crypto.WrongRoleError). Rejections are logged in any case.
	OnReject func(remote net.Addr, err error)
}

func (c *Config) check() error {
	if c.CA == nil || !c.CA.IsCA {
		return errors.New("quicnet: no federation CA certificate configured")
	}
	if c.Credential == nil || c.Credential.Cert == nil || c.Credential.Key == nil {
		return errors.New("quicnet: no party certificate and key configured")
	}
	if _, err := c.Credential.Peer(); err != nil {
		return err
	}
	if now := c.now(); now.After(c.Credential.Cert.NotAfter) {
		return fmt.Errorf("quicnet: this party's certificate %s expired at %s: issue it a new one from the federation CA",
			c.Credential.Cert.Subject.CommonName, c.Credential.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// LoadConfig returns a Config holding the federation CA certificate and
// this party's certificate and key, read from files (the key file must not
// be readable by others). Other fields keep their defaults.
func LoadConfig(caCertPath, certPath, keyPath string) (Config, error) {
	ca, err := crypto.LoadCert(caCertPath)
	if err != nil {
		return Config{}, err
	}
	cred, err := crypto.LoadCredential(certPath, keyPath)
	if err != nil {
		return Config{}, err
	}
	cfg := Config{CA: ca, Credential: cred}
	return cfg, cfg.check()
}

func (c *Config) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (c *Config) maxBody() int {
	if c.MaxBody <= 0 {
		return protocol.DefaultMaxBody
	}
	return c.MaxBody
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func orDefaultInt(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}

// quicConfig is the QUIC configuration of a dialler or, when listener, of
// a listener: only the dialler accepts a unidirectional stream (the
// listener's welcome).
func (c *Config) quicConfig(listener bool) *quic.Config {
	uni := int64(1)
	if listener {
		uni = -1 // none
	}
	return &quic.Config{
		HandshakeIdleTimeout:       orDefault(c.HandshakeTimeout, DefaultHandshakeTimeout),
		MaxIdleTimeout:             orDefault(c.IdleTimeout, DefaultIdleTimeout),
		KeepAlivePeriod:            orDefault(c.KeepAlive, DefaultKeepAlive),
		MaxIncomingStreams:         int64(orDefaultInt(c.MaxStreams, DefaultMaxStreams)),
		MaxIncomingUniStreams:      uni,
		MaxStreamReceiveWindow:     maxStreamWindow,
		MaxConnectionReceiveWindow: maxConnWindow,
	}
}

// baseTLS returns the TLS settings shared by both sides: TLS 1.3 only, our
// ALPN, our certificate, and no built-in verification — verify replaces it
// with a check against the federation CA alone.
func (c *Config) baseTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		MaxVersion:   tls.VersionTLS13,
		NextProtos:   []string{ALPN},
		Certificates: []tls.Certificate{c.Credential.TLSCertificate()},
		Time:         c.now,
	}
}

// verifier returns a VerifyPeerCertificate function that accepts only
// certificates of the federation CA naming one of the roles (any role when
// roles is empty), and records the typed reason of a rejection in *failed.
func (c *Config) verifier(usage crypto.Usage, roles []crypto.Role, failed *atomic.Pointer[error]) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		peer, err := crypto.VerifyPeer(c.CA, raw, c.now(), usage)
		if err == nil && len(roles) > 0 {
			err = peer.Expect(roles...)
		}
		if err != nil {
			failed.Store(&err)
		}
		return err
	}
}
