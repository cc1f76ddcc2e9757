package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/relay"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/party/student"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// wanLinks are the wide-area links of the wan section: every link 40 ms
// each way with 5 ms of jitter and 1 % datagram loss, and one hospital's at
// 150 ms each way.
func wanLinks() (every, slow relay.Link) {
	return relay.Link{Delay: 40 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.01},
		relay.Link{Delay: 150 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.01}
}

// wanBatchDeadline is the aggregator's per-batch deadline in the wan
// section, where its quorum is all hospitals but one: a hospital that has
// not answered by then is left out of the batch, so one slow hospital
// costs the others at most this long per batch. The auditors'
// raft keeps its default 1 s heartbeat and election timeouts, more than ten
// round trips of the 40 ms links, so delay and jitter start no elections.
const wanBatchDeadline = 3 * time.Second

// WANSection is labels per second and batch latency through the whole
// federation with every party's traffic through an impairing relay of our
// own on loopback (UDP for QUIC, TCP for raft): without impairment, with
// every link at wanLink, and with every link at wanLink but one hospital's
// at slowLink. Ratios are against the unimpaired run of the same process.
// The student asks one batch at a time, so a batch's latency is the time
// between two answers.
type WANSection struct {
	Scenarios []WANScenario `json:"scenarios"`
	Batches   int           `json:"batches_per_rep"`
	BatchSize int           `json:"batch_size"`
	// BatchDeadlineMs is the aggregator's per-batch deadline.
	BatchDeadlineMs float64 `json:"batch_deadline_ms"`
	Data            string  `json:"data"`
}

// WANScenario is one set of link conditions.
type WANScenario struct {
	Name         string `json:"name"`
	Links        string `json:"links"`
	SlowHospital string `json:"slow_hospital,omitempty"`
	LabelsPerS   Figure `json:"labels_per_s"`
	// P50Ms and P99Ms are over every batch of every repetition.
	P50Ms float64 `json:"p50_batch_ms"`
	P99Ms float64 `json:"p99_batch_ms"`
	// The ratios are this scenario's over the unimpaired one's.
	LabelsRatio float64 `json:"labels_per_s_ratio"`
	P99Ratio    float64 `json:"p99_batch_ratio"`
	// Dropped is the datagrams the relays dropped during the scenario.
	Dropped uint64 `json:"datagrams_dropped"`
	// Lost is the batches not answered; Twice those charged more than once.
	Lost  int `json:"batches_lost"`
	Twice int `json:"batches_charged_twice"`
}

// wan is the relays a federation's links go through.
type wan struct {
	seed     uint64
	raft     []*relay.Relay // in front of each auditor's raft address
	intake   []*relay.Relay // in front of each auditor's charge intake
	hospital []*relay.Relay // each hospital's link to the aggregator
	student  []*relay.Relay // the student's link to the aggregator
}

func (w *wan) next() uint64 { w.seed++; return w.seed }

// raftFront is launch.AuditorOptions.Front: a TCP relay in front of an
// auditor's raft address.
func (w *wan) raftFront(string) (string, func(string), error) {
	r, err := relay.TCP("", relay.Link{}, w.next())
	if err != nil {
		return "", nil, err
	}
	w.raft = append(w.raft, r)
	return r.Addr(), r.SetTarget, nil
}

// front starts a relay to each target with start and returns their
// addresses; the relays are appended to *to.
func (w *wan) front(targets []string, start func(string, relay.Link, uint64) (*relay.Relay, error), to *[]*relay.Relay) ([]string, error) {
	addrs := make([]string, len(targets))
	for i, t := range targets {
		r, err := start(t, relay.Link{}, w.next())
		if err != nil {
			return nil, err
		}
		*to = append(*to, r)
		addrs[i] = r.Addr()
	}
	return addrs, nil
}

func (w *wan) all() []*relay.Relay { return slices.Concat(w.raft, w.intake, w.hospital, w.student) }

// set puts every link at l and hospital slow's (−1: none) at s.
func (w *wan) set(l relay.Link, slow int, s relay.Link) error {
	for _, r := range w.all() {
		if err := r.SetLink(l); err != nil {
			return err
		}
	}
	if slow >= 0 {
		return w.hospital[slow].SetLink(s)
	}
	return nil
}

func (w *wan) dropped() uint64 {
	var n uint64
	for _, r := range w.all() {
		n += r.Stats().Dropped
	}
	return n
}

func (w *wan) close() {
	for _, r := range w.all() {
		_ = r.Close()
	}
}

func runWAN(ctx context.Context, cfg Config, all *data.Dataset, what string, progress Progress, f *federation) (WANSection, error) {
	sec := WANSection{Batches: cfg.WANQueries / cfg.WANBatchSize, BatchSize: cfg.WANBatchSize, BatchDeadlineMs: ms(wanBatchDeadline), Data: what}
	q := all.Slice(0, sec.Batches*cfg.WANBatchSize)
	slowID := f.m.ByRole(crypto.RoleHospital)[0].ID
	wanLink, slowLink := wanLinks()
	scenarios := []struct {
		name  string
		link  relay.Link
		slow  int
		slowL relay.Link
	}{
		{"unimpaired (through the relays)", relay.Link{}, -1, relay.Link{}},
		{"every link " + wanLink.String(), wanLink, -1, relay.Link{}},
		{"one hospital at " + slowLink.String(), wanLink, 0, slowLink},
	}
	step, steps := 0, len(scenarios)*cfg.Reps
	for si, sc := range scenarios {
		if err := f.wan.set(sc.link, sc.slow, sc.slowL); err != nil {
			return sec, err
		}
		out := WANScenario{Name: sc.name, Links: sc.link.String()}
		if sc.slow >= 0 {
			out.SlowHospital = slowID + " at " + sc.slowL.String()
		}
		drop0 := f.wan.dropped()
		var rates, lat []float64
		for rep := range cfg.Reps {
			progress("wan", step, steps)
			step++
			d := distinct(q, 1000*(si+1)+rep)
			st, err := f.newStudent(cfg.WANBatchSize, 1, quicnet.Backoff{Min: 50 * time.Millisecond, Max: time.Second})
			if err != nil {
				return sec, err
			}
			start := time.Now()
			last := start
			res, err := st.Label(ctx, d, func(done, total int) {
				now := time.Now()
				if done > 0 {
					lat = append(lat, ms(now.Sub(last)))
				}
				last = now
			})
			if err != nil {
				return sec, fmt.Errorf("%s: %w", sc.name, err)
			}
			rates = append(rates, float64(d.Len())/time.Since(start).Seconds())
			out.Lost += sec.Batches - len(res.Batches)
			twice, err := chargedTwice(f, res)
			if err != nil {
				return sec, err
			}
			out.Twice += twice
		}
		out.LabelsPerS = NewFigure(rates)
		slices.Sort(lat)
		out.P50Ms, out.P99Ms = percentile(lat, 0.50), percentile(lat, 0.99)
		out.Dropped = f.wan.dropped() - drop0
		if len(sec.Scenarios) > 0 {
			base := sec.Scenarios[0]
			out.LabelsRatio, out.P99Ratio = out.LabelsPerS.Median/base.LabelsPerS.Median, out.P99Ms/base.P99Ms
		} else {
			out.LabelsRatio, out.P99Ratio = 1, 1
		}
		sec.Scenarios = append(sec.Scenarios, out)
	}
	progress("wan", steps, steps)
	return sec, nil
}

// percentile is the p-quantile of sorted values (zero when there are none).
func percentile[T cmp.Ordered](sorted []T, p float64) T {
	if len(sorted) == 0 {
		var zero T
		return zero
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// chargedTwice counts the batches of res whose charge the ledger accepted
// more than once (it must be none), and fails when one was not charged.
func chargedTwice(f *federation, res *student.Result) (int, error) {
	st := f.machines[0].State()
	raw, err := st.Entries(0, st.TreeSize())
	if err != nil {
		return 0, err
	}
	charges := map[string]int{}
	for _, b := range raw {
		_, c, ok := ledger.AcceptedCommand(b)
		if !ok {
			continue
		}
		if ch, ok := c.Body.(*ledger.Charge); ok {
			charges[ch.BatchID]++
		}
	}
	twice := 0
	for _, b := range res.Batches {
		switch n := charges[b.BatchID]; {
		case n == 0:
			return 0, fmt.Errorf("batch %s was answered but the ledger holds no accepted charge for it", b.BatchID)
		case n > 1:
			twice++
		}
	}
	return twice, nil
}
