package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/nzcfed/nzc/internal/ops"
	"github.com/nzcfed/nzc/party/auditor"
	"github.com/nzcfed/nzc/party/auditor/compliance"
)

// apiHandler serves the compliance API (package compliance): status, peers,
// accounts, entries, checkpoints, proofs and the export for the readers its
// roles allow, and cluster administration for this auditor's own operator.
func apiHandler(n *auditor.Node, led *auditor.Ledger, self string) http.Handler {
	api := &compliance.API{Cluster: n, Ledger: led.State(), Self: self}
	return api.Handler()
}

// serveAPI serves h over HTTPS on addr with the given TLS configuration.
func serveAPI(ctx context.Context, addr string, conf *tls.Config, h http.Handler, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("compliance API: listen on %s: %w (choose a free address with --api)", addr, err)
	}
	ln = tls.NewListener(ln, conf)
	go func() {
		if err := ops.ServeListener(ctx, ln, h, log.With("endpoint", "compliance API (HTTPS)")); err != nil {
			log.Error("compliance API stopped", "err", err)
		}
	}()
	return nil
}
