package auditor

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nzcfed/nzc/internal/ops"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/dashboard"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// cosignTimeout bounds the gathering of signatures for one request.
const cosignTimeout = 5 * time.Second

// serveHTTP starts, in g, the compliance API, the dashboard and the
// operations endpoint on the listeners New bound.
func (a *Auditor) serveHTTP(ctx context.Context, g *errgroup.Group) error {
	if a.api != nil {
		api := &compliance.API{Cluster: cluster{a.node, a.CosignCheckpoint}, Ledger: a.ledger.State(), Self: a.cfg.ID}
		h := api.Handler()
		g.Go(func() error {
			return ops.ServeListener(ctx, a.api, h, a.log.With("endpoint", "compliance API (HTTPS)"))
		})
	}
	if a.dashboard != nil {
		d, err := dashboard.New(dashboard.LedgerSource(a.ledger.State(), a.CosignCheckpoint), dashboard.Options{Auditor: a.cfg.ID, Logger: a.log, Members: a.raftMembers})
		if err != nil {
			return err
		}
		if ap, err := net.ResolveTCPAddr("tcp", a.dashboard.Addr().String()); err == nil && !ap.IP.IsLoopback() {
			a.log.Warn("the dashboard serves plain HTTP without authentication on a non-loopback address; anyone who reaches it reads the ledger's accounts and charges", "addr", a.dashboard.Addr().String())
		}
		g.Go(func() error { return serveDashboard(ctx, a.dashboard, d) })
		a.log.Info("dashboard listening", "url", "http://"+a.dashboard.Addr().String()+"/")
	}
	if a.ops != nil {
		h, err := a.opsHandler()
		if err != nil {
			return err
		}
		g.Go(func() error { return ops.ServeListener(ctx, a.ops, h, a.log) })
	}
	return nil
}

// serveDashboard serves h on ln until ctx ends.
func serveDashboard(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := ops.NewServer(h)
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	defer stop()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// opsHandler serves /livez, /readyz (ready once the node knows a leader
// and has caught up, and Run has applied the genesis or found it applied)
// and /metrics (internal/ops, with the raft metrics), /status (JSON), /checkpoint (this auditor's latest signed
// checkpoint note) and /checkpoint/cosigned (the same checkpoint signed by
// every auditor that answers; 503 without a majority).
func (a *Auditor) opsHandler() (http.Handler, error) {
	reg := ops.NewRegistry()
	if err := a.node.Register(reg); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", ops.Handler(reg, func() (bool, string) {
		if err := a.node.Ready(); err != nil {
			return false, err.Error()
		}
		select {
		case <-a.genesisDone:
		default:
			return false, "applying the federation's genesis"
		}
		return true, "ok"
	}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.node.Status())
	})
	note := func(w http.ResponseWriter, cp []byte, err error, failed int) {
		if err != nil {
			http.Error(w, err.Error(), failed)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(cp)
	}
	mux.HandleFunc("GET /checkpoint", func(w http.ResponseWriter, _ *http.Request) {
		cp, err := a.ledger.Checkpoint(0)
		note(w, cp, err, http.StatusNotFound)
	})
	mux.HandleFunc("GET /checkpoint/cosigned", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), cosignTimeout)
		defer cancel()
		cp, err := a.CosignCheckpoint(ctx)
		note(w, cp, err, http.StatusServiceUnavailable)
	})
	return mux, nil
}

// cluster is what the compliance API reports on and administers: the raft
// node, with the ledger's cosigning.
type cluster struct {
	*raftnode.Node
	cosign func(context.Context) ([]byte, error)
}

func (c cluster) CosignCheckpoint(ctx context.Context) ([]byte, error) { return c.cosign(ctx) }

// raftMembers returns the auditor ids of this auditor's raft membership.
func (a *Auditor) raftMembers() ([]string, error) {
	st := a.node.Status()
	if len(st.Peers) == 0 {
		return nil, errors.New("this auditor knows no raft configuration yet")
	}
	ids := make([]string, 0, len(st.Peers))
	for _, p := range st.Peers {
		ids = append(ids, p.ID)
	}
	return ids, nil
}
