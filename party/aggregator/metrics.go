package aggregator

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	released     prometheus.Counter
	refusals     *prometheus.CounterVec
	batchSeconds prometheus.Histogram
	epsilon      *prometheus.GaugeVec
	hospitals    prometheus.Gauge
	// receiptsRejected counts ledger answers of "committed" whose receipt
	// did not verify: an auditor's word without a majority's proof.
	receiptsRejected prometheus.Counter
	// leftOut counts hospitals left out of batches whose worst case their
	// budgets could not pay for.
	leftOut prometheus.Counter
	// missed counts, per hospital, the batches whose deadline it missed;
	// leftOutNow is 1 for each hospital left out of batches for missing
	// one (reason missed-deadline) or probed (reason probing).
	missed     *prometheus.CounterVec
	leftOutNow *prometheus.GaugeVec
	// svtBurnt counts nzc-svt sessions that burnt; svtBlocked is 1 for
	// each hospital no session opens for (burns).
	svtBurnt   prometheus.Counter
	svtBlocked *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		released: prometheus.NewCounter(prometheus.CounterOpts{Name: "nzc_aggregator_labels_released_total",
			Help: "Labels released to students after their charge was committed."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nzc_aggregator_refusals_total",
			Help: "Label requests refused, by reason (budget, quorum, ledger-unavailable, ledger-rejected, bad-request)."}, []string{"reason"}),
		batchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nzc_aggregator_batch_seconds",
			Help: "Time from a label request to the release of its labels.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		epsilon: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nzc_aggregator_epsilon_spent",
			Help: "ε spent per hospital, as the ledger reports it after each charge."}, []string{"hospital"}),
		hospitals: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nzc_aggregator_hospitals_connected",
			Help: "Hospitals connected and registered."}),
		receiptsRejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "nzc_aggregator_receipts_rejected_total",
			Help: "Ledger answers of committed whose receipt did not verify against the pinned auditor keys; nothing was released for them."}),
		leftOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "nzc_aggregator_hospitals_left_out_total",
			Help: "Hospitals left out of a batch because their budget could not pay for its worst case."}),
		missed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nzc_aggregator_deadlines_missed_total",
			Help: "Batches whose deadline a hospital missed (its votes did not arrive while the batch waited), by hospital."}, []string{"hospital"}),
		leftOutNow: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nzc_aggregator_hospital_left_out",
			Help: "1 for each hospital left out of batches for a backing-off period after missing a deadline (reason missed-deadline), or probed by batches that do not wait for it (reason probing)."}, []string{"hospital", "reason"}),
	}
	m.svtBurnt, m.svtBlocked = newBurnMetrics()
	if reg != nil {
		reg.MustRegister(m.released, m.refusals, m.batchSeconds, m.epsilon, m.hospitals, m.receiptsRejected, m.leftOut, m.missed, m.leftOutNow, m.svtBurnt, m.svtBlocked)
	}
	return m
}
