package main

import (
	"context"
	"encoding/json"
	"log/slog"
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

func serveAPI(ctx context.Context, addr string, h http.Handler, log *slog.Logger) {
	if addr == "" {
		return
	}
	go func() {
		if err := ops.Serve(ctx, addr, h, log.With("endpoint", "compliance API")); err != nil {
			log.Error("compliance API stopped", "err", err)
		}
	}()
}
