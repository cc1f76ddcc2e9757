// Package node holds what the party binaries share when they start a
// service: the QUIC settings from the TLS configuration, and the operations
// endpoint.
package node

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/nzcfed/nzc/cmd/internal/config"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/ops"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// NetConfig loads the federation CA and the party's certificate.
func NetConfig(t config.TLS, log *slog.Logger) (quicnet.Config, error) {
	ca, err := crypto.LoadCert(t.CA)
	if err != nil {
		return quicnet.Config{}, err
	}
	cred, err := crypto.LoadCredential(t.Cert, t.Key)
	if err != nil {
		return quicnet.Config{}, err
	}
	return quicnet.Config{CA: ca, Credential: cred, Logger: log}, nil
}

// ServeOps serves h on addr in the background until ctx ends; an empty
// addr serves nothing. A failure to listen is logged.
func ServeOps(ctx context.Context, addr string, h http.Handler, log *slog.Logger) {
	if addr == "" {
		return
	}
	go func() {
		if err := ops.Serve(ctx, addr, h, log); err != nil {
			log.Error("operations endpoint stopped", "err", err)
		}
	}()
}
