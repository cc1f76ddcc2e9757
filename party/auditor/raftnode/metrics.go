package raftnode

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are this node's Prometheus collectors; Register adds them to the
// service's registry.
type metrics struct {
	collectors []prometheus.Collector
	submitDur  prometheus.Histogram
	submits    *prometheus.CounterVec
	batch      prometheus.Histogram
}

func newMetrics(n *Node) *metrics {
	m := &metrics{}
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
	m.collectors = append(m.collectors,
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
	if fc := n.fwd; fc != nil {
		m.collectors = append(m.collectors, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "nzc_auditor_peer_dials_total",
			Help: "Connections this auditor dialled to other auditors for forwarding, membership and cosigning, failed attempts included (each a mutual-TLS handshake; idle ones are reused, so this grows with restarts and failures, not with requests).",
		}, func() float64 { return float64(fc.dials.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "nzc_auditor_peer_dials_failed_total",
				Help: "Dials to other auditors that made no connection (among nzc_auditor_peer_dials_total): a peer down, refusing, or too slow to finish the handshake in time.",
			}, func() float64 { return float64(fc.dialsFailed.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "nzc_auditor_peer_conns_dropped_total",
				Help: "Connections to other auditors closed because a call on them failed or ended before its answer (a peer down, or a call out of time); each is dialled again when next needed.",
			}, func() float64 { return float64(fc.dropped.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "nzc_auditor_peer_calls_abandoned_total",
				Help: "Calls to other auditors cancelled by their caller before the answer came (their connections are among those dropped). A round of cosigning leaves its asks to finish, so this stays at 0 while receipts flow.",
			}, func() float64 { return float64(fc.abandoned.Load()) }),
			gauge("nzc_auditor_peer_calls_in_flight", "Calls to other auditors (forwarded commands, membership, cosigning) under way.",
				func() float64 { return float64(fc.inFlight.Load()) }))
	}
	if mux := n.mux; mux != nil {
		m.collectors = append(m.collectors, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "nzc_auditor_raft_peers_refused_total",
			Help: "Raft connections closed because the peer's certificate is not the server it spoke for (an RPC header naming another id, or a dialled address presenting another id's certificate).",
		}, func() float64 { return float64(mux.refused.Load()) }))
	}
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

// Register adds this node's collectors (submissions, apply batches and raft
// state, all named nzc_auditor_*) to reg, the registry the service serves
// on its /metrics.
func (n *Node) Register(reg prometheus.Registerer) error {
	for _, c := range n.met.collectors {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("auditor: register raft metrics: %w", err)
		}
	}
	return nil
}
