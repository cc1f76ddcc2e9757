package quicnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"

	"github.com/quic-go/quic-go"

	"github.com/nzcfed/nzc/crypto"
)

// ErrRejected is matched (errors.Is) by *RejectedError.
var ErrRejected = errors.New("connection refused by the peer")

// RejectedError says the party dialled refused this party: it did not
// accept our certificate (another federation's CA, expired) or our role.
type RejectedError struct {
	Addr string
	// Reason is the peer's explanation, or the TLS alert it sent.
	Reason string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("the party at %s refused this connection (%s): check that this party's certificate comes from the federation CA, has not expired, and has a role the peer accepts; the peer's log says which",
		e.Addr, e.Reason)
}

// Is reports whether target is ErrRejected.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// Dial connects to the party at addr (host:port), which must present a
// federation certificate with role peerRole, and returns once that party
// has accepted this one. Errors: *crypto.PeerCertError or
// *crypto.WrongRoleError when we refuse the peer, *RejectedError when it
// refuses us, otherwise network errors.
func Dial(ctx context.Context, addr string, cfg Config, peerRole crypto.Role) (*Conn, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	var failed atomic.Pointer[error]
	tlsConf := cfg.baseTLS()
	tlsConf.InsecureSkipVerify = true // replaced by the federation check below
	tlsConf.VerifyPeerCertificate = cfg.verifier(crypto.UsageServer, []crypto.Role{peerRole}, &failed)
	if host, _, err := net.SplitHostPort(addr); err == nil {
		tlsConf.ServerName = host
	}
	qc, err := quic.DialAddr(ctx, addr, tlsConf, cfg.quicConfig(false))
	if err != nil {
		return nil, dialErr(addr, err, &failed)
	}
	// Wait until the peer has checked our certificate and role.
	wctx, cancel := context.WithTimeout(ctx, orDefault(cfg.HandshakeTimeout, DefaultHandshakeTimeout))
	defer cancel()
	if err := awaitWelcome(wctx, qc); err != nil {
		_ = qc.CloseWithError(codeClosed, "setup failed")
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, context.Cause(ctx))
		}
		if cerr := qc.Context().Err(); cerr != nil {
			err = context.Cause(qc.Context())
		}
		return nil, dialErr(addr, err, &failed)
	}
	c, err := newConn(qc, &cfg)
	if err != nil {
		_ = qc.CloseWithError(codeClosed, "bad peer certificate")
		return nil, err
	}
	c.log.Info("connected")
	return c, nil
}

func awaitWelcome(ctx context.Context, qc *quic.Conn) error {
	s, err := qc.AcceptUniStream(ctx)
	if err != nil {
		return err
	}
	var b [1]byte
	if _, err := io.ReadFull(s, b[:]); err != nil {
		return err
	}
	if b[0] != welcome {
		return fmt.Errorf("unexpected setup byte %#x: the peer speaks another protocol", b[0])
	}
	return nil
}

// dialErr turns a failed dial into the most useful typed error.
func dialErr(addr string, err error, failed *atomic.Pointer[error]) error {
	if p := failed.Load(); p != nil {
		return fmt.Errorf("dial %s: %w", addr, *p) // we refused the peer
	}
	var te *quic.TransportError
	if errors.As(err, &te) && te.Remote && te.ErrorCode.IsCryptoError() {
		reason := te.ErrorMessage
		if reason == "" {
			reason = "TLS alert: " + te.ErrorCode.Message()
		}
		return &RejectedError{Addr: addr, Reason: reason}
	}
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote && ae.ErrorCode == codeRejected {
		return &RejectedError{Addr: addr, Reason: ae.ErrorMessage}
	}
	return fmt.Errorf("dial %s: %w", addr, err)
}
