package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nzcfed/nzc/internal/ops"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor"
)

// apiHandler serves the read side of the ledger for compliance officers:
//
//	GET /v1/export    the whole log with a checkpoint cosigned by every
//	                  auditor that answered, and the auditors' keys, in the
//	                  ledger's export encoding (verify it with
//	                  ledger.Verify or `nzc ledger verify`)
//	GET /v1/accounts  every hospital's budget account, as JSON
func apiHandler(n *auditor.Node, led *auditor.Ledger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/export", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		b, err := export(ctx, n, led)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /v1/accounts", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(led.State().Accounts())
	})
	return mux
}

// export returns the log up to a checkpoint cosigned by the auditors.
func export(ctx context.Context, n *auditor.Node, led *auditor.Ledger) ([]byte, error) {
	cp, err := n.CosignCheckpoint(ctx)
	if err != nil {
		return nil, err
	}
	c, err := ledger.PeekCheckpoint(cp)
	if err != nil {
		return nil, err
	}
	st := led.State()
	entries, err := st.Entries(0, c.Size)
	if err != nil {
		return nil, err
	}
	keys, err := st.AuditorKeys(c.Size)
	if err != nil {
		return nil, err
	}
	return ledger.Export{Entries: entries, Checkpoints: [][]byte{cp}, Keys: keys}.Encode()
}

// serveAPI serves the compliance API over HTTPS with the auditor's
// federation certificate: readers check it against the federation CA.
func serveAPI(ctx context.Context, addr string, cert tls.Certificate, h http.Handler, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("compliance API: listen on %s: %w (choose a free address with --api)", addr, err)
	}
	ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	go func() {
		if err := ops.ServeListener(ctx, ln, h, log.With("endpoint", "compliance API (HTTPS)")); err != nil {
			log.Error("compliance API stopped", "err", err)
		}
	}()
	return nil
}
