// Package ops serves the operations endpoints every NZC service exposes:
// /livez (the process is running), /readyz (it can do its job now, or what it
// is waiting for) and /metrics (Prometheus text format, from a registry the
// service owns — never the global one).
package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Readiness reports whether a service is ready; when it is not, the reason
// says what it is waiting for ("waiting for 2 of 3 hospitals").
type Readiness func() (ready bool, reason string)

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves /livez, /readyz and /metrics.
func Handler(reg *prometheus.Registry, ready Readiness) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, reason := true, "ready"
		if ready != nil {
			ok, reason = ready()
		}
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, reason)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// Serve listens on addr and serves h until ctx ends, then shuts down
// gracefully. The listening address is logged (useful with port 0).
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("ops endpoint: listen on %s: %w (choose a free address with ops.listen)", addr, err)
	}
	return ServeListener(ctx, ln, h, log)
}

// Timeouts of every HTTP server of the federation (NewServer): a client
// has ReadHeaderTimeout to send a request's headers and ReadTimeout for
// the whole request, a response (an export of the ledger included) must be
// written within WriteTimeout, and an idle keep-alive connection is closed
// after IdleTimeout, so that clients that stall cannot hold connections and
// goroutines without end.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = 5 * time.Minute
	IdleTimeout       = 2 * time.Minute
)

// NewServer returns an HTTP server of h with the federation's timeouts.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout}
}

// ServeListener is Serve on an existing listener.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := NewServer(h)
	log.Info("operations endpoint listening", "addr", ln.Addr().String(), "paths", "/livez /readyz /metrics")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			return err
		}
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}
