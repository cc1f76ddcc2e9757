package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nzcfed/nzc/party/auditor"
	"github.com/nzcfed/nzc/party/auditor/dashboard"
)

// serveDashboard serves the ledger dashboard over plain HTTP at addr until
// ctx ends. It has no authentication, so it belongs on loopback (the
// default); docs/AUDITOR.md explains how to reach it from another desk.
func serveDashboard(ctx context.Context, addr, id string, n *auditor.Node, led *auditor.Ledger, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	d, err := dashboard.New(dashboard.LedgerSource(led.State(), n.CosignCheckpoint), dashboard.Options{Auditor: id, Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dashboard: listen on %s: %w (choose a free address with --dashboard, or --dashboard '' to turn it off)", addr, err)
	}
	if ap, err := net.ResolveTCPAddr("tcp", ln.Addr().String()); err == nil && !ap.IP.IsLoopback() {
		log.Warn("the dashboard serves plain HTTP without authentication on a non-loopback address; anyone who reaches it reads the ledger's accounts and charges", "addr", ln.Addr().String())
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("dashboard stopped", "err", err)
		}
	}()
	log.Info("dashboard listening", "url", "http://"+ln.Addr().String()+"/")
	return nil
}
