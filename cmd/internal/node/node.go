// Package node holds what the party binaries share when they start a
// service: the logger, the QUIC settings from the TLS configuration, the
// memory bound, and the operations endpoint.
package node

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/internal/ops"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// Client is what a party's command that reaches others needs: its logger
// (to w, each line naming party) and its QUIC settings from t.
func Client(w io.Writer, party string, l config.Log, t config.TLS) (*slog.Logger, quicnet.Config, error) {
	log := cli.NewLogger(w, l).With("party", party)
	nc, err := netConfig(t, log)
	return log, nc, err
}

// Start is what every service does first: Client, then it sets the memory
// bound of o.
func Start(w io.Writer, party string, l config.Log, o config.Ops, t config.TLS) (*slog.Logger, quicnet.Config, error) {
	log, nc, err := Client(w, party, l, t)
	if err != nil {
		return nil, quicnet.Config{}, err
	}
	return log, nc, ApplyMemoryLimit(o, log)
}

// netConfig loads the federation CA and the party's certificate.
func netConfig(t config.TLS, log *slog.Logger) (quicnet.Config, error) {
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

// ApplyMemoryLimit sets the Go runtime's soft memory limit to the
// configured ops.memory_limit (none when 0).
func ApplyMemoryLimit(o config.Ops, log *slog.Logger) error {
	n, err := config.ParseSize(o.MemoryLimit)
	if err != nil || n == 0 {
		return err
	}
	debug.SetMemoryLimit(n)
	log.Info("memory bound set", "ops.memory_limit", o.MemoryLimit, "bytes", n)
	return nil
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
