// Package node holds what the party binaries share when they start a
// service: the QUIC settings from the TLS configuration, and the operations
// endpoint.
package node

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"sync"

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

// PauseEnv names the environment variable that stops a service, once, at a
// named point of its work (for example NZCTEST_PAUSE_AT=pending-written in
// nzc-aggregator) until it is killed. Fault tests use it to crash a party in
// a known state; it is not a configuration key and production leaves it
// unset.
const PauseEnv = "NZCTEST_PAUSE_AT"

// PauseHook returns the pause function for a party's Config.Pause, or nil
// when PauseEnv is unset. The first time the party reaches the named point
// it logs "paused for a fault test" and waits until ctx ends.
func PauseHook(log *slog.Logger) func(ctx context.Context, point string) {
	at := os.Getenv(PauseEnv)
	if at == "" {
		return nil
	}
	var once sync.Once
	return func(ctx context.Context, point string) {
		if point != at {
			return
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return
		}
		log.Warn("paused for a fault test", "point", point, "env", PauseEnv)
		<-ctx.Done()
	}
}
