package auditor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are this node's Prometheus collectors, in a registry of its own.
type metrics struct {
	reg       *prometheus.Registry
	submitDur prometheus.Histogram
	submits   *prometheus.CounterVec
	batch     prometheus.Histogram
}

func newMetrics(n *Node) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.submitDur = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "nzc_auditor_submit_seconds",
		Help:    "Time from Submit to the command being applied on the leader (or the error).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5ms .. ~4s
	})
	m.submits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nzc_auditor_submits_total",
		Help: "Submitted commands by outcome.",
	}, []string{"outcome"})
	m.batch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "nzc_auditor_apply_batch_commands",
		Help:    "Commands applied to the state machine per raft batch.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 .. 1024
	})
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	m.reg.MustRegister(
		m.submitDur, m.submits, m.batch,
		gauge("nzc_auditor_raft_state", "Raft state: 0 follower, 1 candidate, 2 leader, 3 shutdown.",
			func() float64 { return float64(n.raft.State()) }),
		gauge("nzc_auditor_raft_leader", "1 if this node is the raft leader.", func() float64 {
			if n.raft.State() == raft.Leader {
				return 1
			}
			return 0
		}),
		gauge("nzc_auditor_raft_term", "Current raft term.", func() float64 { return float64(n.raft.CurrentTerm()) }),
		gauge("nzc_auditor_raft_last_index", "Last raft log index.", func() float64 { return float64(n.raft.LastIndex()) }),
		gauge("nzc_auditor_raft_commit_index", "Raft commit index known to this node.", func() float64 { return float64(n.commitIndex()) }),
		gauge("nzc_auditor_raft_applied_index", "Last raft index applied to the state machine.", func() float64 { return float64(n.raft.AppliedIndex()) }),
	)
	return m
}

func (m *metrics) observeSubmit(d time.Duration, err error) {
	m.submitDur.Observe(d.Seconds())
	m.submits.WithLabelValues(outcome(err)).Inc()
}

func (m *metrics) observeBatch(n int) { m.batch.Observe(float64(n)) }

func outcome(err error) string {
	var rej *RejectedError
	var nl *NotLeaderError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &rej):
		return "rejected"
	case errors.As(err, &nl):
		return "not_leader"
	case errors.Is(err, ErrNoLeader):
		return "no_leader"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrOutcomeUnknown):
		return "outcome_unknown"
	case errors.Is(err, ErrShutdown):
		return "shutdown"
	default:
		return "error"
	}
}

// cosignTimeout bounds the gathering of signatures for one request.
const cosignTimeout = 5 * time.Second

// Handler serves /livez, /readyz, /metrics, /status (JSON), /checkpoint
// (this auditor's latest signed checkpoint note) and /checkpoint/cosigned
// (the same checkpoint signed by every auditor that answers; 503 without a
// majority) for this node. Mount it on
// the operator's HTTP(S) server.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		if n.lifetime.Err() != nil {
			http.Error(w, ErrShutdown.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := n.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.met.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(n.Status())
	})
	mux.HandleFunc("GET /checkpoint", func(w http.ResponseWriter, _ *http.Request) {
		cp, err := n.Checkpoint(0)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(cp)
	})
	mux.HandleFunc("GET /checkpoint/cosigned", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), cosignTimeout)
		defer cancel()
		cp, err := n.CosignCheckpoint(ctx)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(cp)
	})
	return mux
}
