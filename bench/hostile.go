package bench

import (
	"bufio"
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// hostileRSSBoundMiB is the stated bound on how far the process's resident
// memory may rise above the honest run's peak while the hostile party
// attacks: the aggregator keeps at most 4 connections of a party, each with
// at most 32 MiB of request bodies in flight and 16 MiB of flow-control
// window, 192 MiB in all, and a hostile party's other requests hold only
// their headers.
const hostileRSSBoundMiB = 256

// HostileSection is honest labels per second through the federation, alone
// and beside a hostile hospital that, for the whole honest run, sends junk
// Hellos (four billion teachers; two on one connection), opens more
// connections than it may, leaves request streams half sent, sends frames
// over their type's size and requests it may not send, and floods the
// aggregator with relayed ledger commands. Both runs are in this process,
// alternated over the repetitions; the ratio is the median under attack
// over the honest median.
type HostileSection struct {
	Queries   int `json:"queries_per_rep"`
	BatchSize int `json:"batch_size"`
	Window    int `json:"student_window"`
	// HonestLabelsPerS is the honest-only run, UnderAttackLabelsPerS the
	// same run beside the hostile party; Ratio is their medians' ratio.
	HonestLabelsPerS      Figure  `json:"honest_labels_per_s"`
	UnderAttackLabelsPerS Figure  `json:"under_attack_labels_per_s"`
	Ratio                 float64 `json:"ratio"`
	// The process's peak resident memory during the honest runs and
	// during the attacks, and the stated bound on the rise.
	HonestPeakRSSMiB float64 `json:"honest_peak_rss_mib"`
	AttackPeakRSSMiB float64 `json:"attack_peak_rss_mib"`
	RSSBoundMiB      float64 `json:"rss_bound_mib"`
	// StallingLabelsPerS is the honest student's labels/s while one
	// hospital answers every batch only at its deadline (BatchDeadlineS),
	// measured over Reps runs after the others; the first of them pays
	// that deadline once. StallingRatio is its median over the honest
	// median.
	StallingLabelsPerS Figure  `json:"stalling_labels_per_s"`
	StallingRatio      float64 `json:"stalling_ratio"`
	BatchDeadlineS     float64 `json:"batch_deadline_s"`
	// SVTBurn is what a hospital with a third of the teachers voting
	// against the others costs the honest ones under nzc-svt.
	SVTBurn SVTBurn `json:"svt_burn"`
	// Attacks is what the hostile party tried, and how it was answered.
	Attacks HostileAttacks `json:"attacks"`
	// Lost is the honest batches not answered; Twice those charged more
	// than once. Both must be 0.
	Lost  int    `json:"batches_lost"`
	Twice int    `json:"batches_charged_twice"`
	Data  string `json:"data"`
}

// HostileAttacks counts the hostile party's attempts over every repetition.
type HostileAttacks struct {
	Connections        int64 `json:"connections_tried"`
	ConnectionsRefused int64 `json:"connections_refused"`
	Hellos             int64 `json:"junk_hellos"`
	HellosAccepted     int64 `json:"junk_hellos_accepted"`
	HalfSentStreams    int64 `json:"half_sent_streams"`
	Oversized          int64 `json:"oversized_or_forbidden_frames"`
	OversizedServed    int64 `json:"oversized_or_forbidden_frames_served"`
	Relays             int64 `json:"relayed_commands"`
	RelaysLimited      int64 `json:"relayed_commands_limited"`
}

// hostileRate bounds each attack's attempts per second: the hostile party
// runs in the same process as the honest ones, so an unbounded loop would
// measure the machine's CPU rather than the federation's defences.
const hostileRate = 100

// pace waits for the next of rate attempts per second and says whether to
// go on (false once ctx ends).
func pace(ctx context.Context, rate int) bool {
	t := time.NewTimer(time.Second / time.Duration(rate))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// hostileParty is a hospital of the federation's CA that the aggregator
// has no registered ensemble for.
type hostileParty struct {
	net quicnet.Config
	key ed25519.PrivateKey // signs its relayed commands
	id  string
	agg string
	n   HostileAttacks
}

func newHostileParty(f *federation) (*hostileParty, error) {
	m, pf, err := provision.AddParty(f.M.Dir, crypto.RoleHospital, "hostile-1", provision.AddPartyOptions{})
	if err != nil {
		return nil, err
	}
	cred, err := crypto.LoadCredential(m.Path(pf.Cert), m.Path(pf.Key))
	if err != nil {
		return nil, err
	}
	key, err := crypto.LoadPrivateKey(m.Path(pf.SigningKey))
	if err != nil {
		return nil, err
	}
	return &hostileParty{net: quicnet.Config{CA: f.CA, Credential: cred}, key: key, id: pf.ID, agg: f.aggAddr}, nil
}

// attack runs every attack until ctx ends. The attacks that hold one
// connection get theirs first (the one that opens connections without end
// would otherwise take every place the aggregator keeps for the party).
func (h *hostileParty) attack(ctx context.Context) {
	var held []*quicnet.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for len(held) < 3 && pace(ctx, hostileRate) {
		if c, err := h.dial(ctx); err == nil {
			held = append(held, c)
		}
	}
	if len(held) < 3 {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { h.halfSent(ctx, held[0]) })
	wg.Go(func() { h.oversized(ctx, held[1]) })
	wg.Go(func() { h.relays(ctx, held[2]) })
	wg.Go(func() { h.hellos(ctx) })
	wg.Wait()
}

func (h *hostileParty) dial(ctx context.Context) (*quicnet.Conn, error) {
	atomic.AddInt64(&h.n.Connections, 1)
	c, err := quicnet.Dial(ctx, h.agg, h.net, crypto.RoleAggregator)
	if err != nil && ctx.Err() == nil {
		atomic.AddInt64(&h.n.ConnectionsRefused, 1)
	}
	return c, err
}

// hellos dials again and again and announces four billion teachers (and
// three classes), twice on each connection.
func (h *hostileParty) hellos(ctx context.Context) {
	hello := &nzcpb.Hello{ProtocolVersion: protocol.ProtocolVersion, Role: nzcpb.Role_ROLE_HOSPITAL, PartyId: h.id,
		AgeRecipient: "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p",
		Hospital:     &nzcpb.HospitalInfo{NumTeachers: 4_000_000_000, NumClasses: 3}}
	// It keeps its last connections open, more than the aggregator keeps
	// of one party, so that its next dials meet the limit.
	var open []*quicnet.Conn
	defer func() {
		for _, c := range open {
			_ = c.Close()
		}
	}()
	for pace(ctx, hostileRate) {
		c, err := h.dial(ctx)
		if err != nil {
			continue
		}
		for range 2 {
			atomic.AddInt64(&h.n.Hellos, 1)
			if err := c.Invoke(ctx, hello, &nzcpb.Ack{}); err == nil {
				atomic.AddInt64(&h.n.HellosAccepted, 1)
			}
		}
		if open = append(open, c); len(open) > 2*quicnet.DefaultMaxConnsPerPeer {
			_ = open[0].Close()
			open = open[1:]
		}
	}
}

// halfSent keeps a connection's streams filled with budget requests whose
// header is sent and whose body never is, until ctx ends.
func (h *hostileParty) halfSent(ctx context.Context, c *quicnet.Conn) {
	hdr := binary.AppendUvarint(binary.AppendUvarint(nil, uint64(protocol.TypeBudgetRequest)), protocol.MaxControlBody)
	var open []io.Closer
	defer func() {
		for _, s := range open {
			_ = s.Close()
		}
	}()
	for ctx.Err() == nil && len(open) < 4*quicnet.DefaultMaxStreams {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		s, err := c.RawStream(sctx)
		cancel()
		if err != nil {
			continue // the stream limit holds it back until one closes
		}
		if _, err := s.Write(append(hdr, 0)); err != nil {
			_ = s.Close()
			continue
		}
		atomic.AddInt64(&h.n.HalfSentStreams, 1)
		open = append(open, s)
	}
	<-ctx.Done()
}

// oversized sends frames over their type's limit and label requests a
// hospital may not send, each announced at the largest size.
func (h *hostileParty) oversized(ctx context.Context, c *quicnet.Conn) {
	frames := [][]byte{
		binary.AppendUvarint(binary.AppendUvarint(nil, uint64(protocol.TypeHello)), 1<<20),
		binary.AppendUvarint(binary.AppendUvarint(nil, uint64(protocol.TypeLedgerSubmit)), 8<<20),
		binary.AppendUvarint(binary.AppendUvarint(nil, uint64(protocol.TypeLabelRequest)), protocol.DefaultMaxBody),
	}
	for i := 0; pace(ctx, hostileRate); i++ {
		s, err := c.RawStream(ctx)
		if err != nil {
			return
		}
		atomic.AddInt64(&h.n.Oversized, 1)
		if _, err := s.Write(frames[i%len(frames)]); err == nil {
			rt, _, err := protocol.NewFrameReader(bufio.NewReader(s), 0).Next()
			if err == nil && rt != protocol.TypeError {
				atomic.AddInt64(&h.n.OversizedServed, 1)
			}
		}
		_ = s.Close()
	}
}

// relays floods the aggregator with change-cap commands signed by the
// hostile hospital, which the ledger does not know.
func (h *hostileParty) relays(ctx context.Context, c *quicnet.Conn) {
	for v := uint64(1); pace(ctx, hostileRate); v++ {
		cmd, err := ledger.Sign(&ledger.ChangeCap{Hospital: h.id, Version: v, CapEpsilon: 1, CapDelta: 1e-5, Timestamp: int64(v)}, h.id, h.key)
		if err != nil {
			return
		}
		atomic.AddInt64(&h.n.Relays, 1)
		err = c.Invoke(ctx, &nzcpb.LedgerSubmit{Command: cmd}, &nzcpb.LedgerResult{})
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Code == protocol.CodeUnavailable {
			atomic.AddInt64(&h.n.RelaysLimited, 1)
		}
	}
}

// rssSampler records the process's peak resident memory while it runs.
type rssSampler struct {
	peak atomic.Int64 // KiB
	stop chan struct{}
	done chan struct{}
}

func sampleRSS() *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if kb, ok := residentKiB(); ok && kb > s.peak.Load() {
				s.peak.Store(kb)
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// end stops sampling and returns the peak in MiB.
func (s *rssSampler) end() float64 {
	close(s.stop)
	<-s.done
	return float64(s.peak.Load()) / 1024
}

// residentKiB is the process's resident memory (VmRSS), where /proc has
// it.
func residentKiB() (int64, bool) {
	r := readResident()
	return int64(r.all >> 10), r.all > 0
}

func runHostile(ctx context.Context, cfg Config, f *federation, all *data.Dataset, what string, progress Progress) (HostileSection, error) {
	sec := HostileSection{Queries: cfg.E2EQueries, BatchSize: cfg.BatchSize, Window: cfg.Window, RSSBoundMiB: hostileRSSBoundMiB, Data: what}
	q := all.Slice(0, cfg.E2EQueries)
	h, err := newHostileParty(f)
	if err != nil {
		return sec, err
	}
	batches := (cfg.E2EQueries + cfg.BatchSize - 1) / cfg.BatchSize
	var honest, attacked []float64
	steps := 2 * cfg.Reps
	for rep := range steps {
		progress("hostile", rep, steps)
		underAttack := rep%2 == 1
		st, err := f.newStudent(cfg.BatchSize, cfg.Window, quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond})
		if err != nil {
			return sec, err
		}
		d := distinct(q, 5000+rep)
		rss := sampleRSS()
		actx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		if underAttack {
			wg.Go(func() { h.attack(actx) })
		}
		start := time.Now()
		res, err := st.Label(ctx, d, nil)
		el := time.Since(start)
		stop()
		wg.Wait()
		peak := rss.end()
		if err != nil {
			return sec, fmt.Errorf("honest student (under attack %v): %w", underAttack, err)
		}
		sec.Lost += batches - len(res.Batches)
		twice, err := chargedTwice(f, res)
		if err != nil {
			return sec, err
		}
		sec.Twice += twice
		rate := float64(d.Len()) / el.Seconds()
		if underAttack {
			attacked = append(attacked, rate)
			sec.AttackPeakRSSMiB = max(sec.AttackPeakRSSMiB, peak)
		} else {
			honest = append(honest, rate)
			sec.HonestPeakRSSMiB = max(sec.HonestPeakRSSMiB, peak)
		}
	}
	// One hospital answers only at its deadline, for Reps runs in a row.
	var stalled []float64
	f.stalling.Store(true)
	for rep := range cfg.Reps {
		progress("hostile", steps+rep, steps+cfg.Reps)
		st, err := f.newStudent(cfg.BatchSize, cfg.Window, quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond})
		if err != nil {
			f.stalling.Store(false)
			return sec, err
		}
		d := distinct(q, 6000+rep)
		start := time.Now()
		res, err := st.Label(ctx, d, nil)
		el := time.Since(start)
		if err != nil {
			f.stalling.Store(false)
			return sec, fmt.Errorf("honest student beside a stalling hospital: %w", err)
		}
		sec.Lost += batches - len(res.Batches)
		twice, err := chargedTwice(f, res)
		if err != nil {
			f.stalling.Store(false)
			return sec, err
		}
		sec.Twice += twice
		stalled = append(stalled, float64(d.Len())/el.Seconds())
	}
	f.stalling.Store(false)
	progress("hostile", steps+cfg.Reps, steps+cfg.Reps)
	sec.HonestLabelsPerS, sec.UnderAttackLabelsPerS = NewFigure(honest), NewFigure(attacked)
	sec.StallingLabelsPerS, sec.BatchDeadlineS = NewFigure(stalled), cmp.Or(cfg.BatchDeadline, DefaultBatchDeadline).Seconds()
	if m := sec.HonestLabelsPerS.Median; m > 0 {
		sec.StallingRatio = sec.StallingLabelsPerS.Median / m
	}
	if m := sec.HonestLabelsPerS.Median; m > 0 {
		sec.Ratio = sec.UnderAttackLabelsPerS.Median / m
	}
	sec.Attacks = HostileAttacks{
		Connections: atomic.LoadInt64(&h.n.Connections), ConnectionsRefused: atomic.LoadInt64(&h.n.ConnectionsRefused),
		Hellos: atomic.LoadInt64(&h.n.Hellos), HellosAccepted: atomic.LoadInt64(&h.n.HellosAccepted),
		HalfSentStreams: atomic.LoadInt64(&h.n.HalfSentStreams),
		Oversized:       atomic.LoadInt64(&h.n.Oversized), OversizedServed: atomic.LoadInt64(&h.n.OversizedServed),
		Relays: atomic.LoadInt64(&h.n.Relays), RelaysLimited: atomic.LoadInt64(&h.n.RelaysLimited),
	}
	return sec, nil
}
