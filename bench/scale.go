package bench

import (
	"bufio"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/internal/cputime"
	"github.com/nzcfed/nzc/internal/parallel"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// ScaleSection is how an auditor's ledger grows with its history: the
// ledger's state machine driven, in this process, to ScaleCharges accepted
// charges (three hospitals each, signatures checked in raft-sized batches
// as an auditor does) over the history an auditor keeps — on disk in a
// bbolt file ("disk"), or in memory ("memory", as before the history left
// the heap). At every decade of charges it reads the heap above the empty
// ledger's, the resident size and the apply rate; at the end the snapshot's
// size and time, the time an auditor takes from restart to ready (open the
// history, restore the snapshot), and the rate and heap of verifying the
// whole log's export.
type ScaleSection struct {
	Charges int          `json:"charges"`
	History string       `json:"history"` // "disk" or "memory"
	Points  []ScalePoint `json:"points"`
	// HeapBytesPerCharge is the heap each charge adds: the growth from
	// the first point to the last over the charges between them.
	HeapBytesPerCharge float64 `json:"heap_bytes_per_charge"`
	SnapshotBytes      int     `json:"snapshot_bytes"`
	SnapshotMs         float64 `json:"snapshot_ms"`
	RestartMs          float64 `json:"restart_ms"`
	VerifyEntriesPerS  float64 `json:"verify_entries_per_s"`
	// VerifyCPUUs is the process's CPU time per entry while verifying
	// (every core's), and VerifyPeakHeapMiB the heap's peak meanwhile.
	VerifyCPUUs       float64 `json:"verify_cpu_us"`
	VerifyPeakHeapMiB float64 `json:"verify_peak_heap_mib"`
	// VerifyPeakRSSMiB is the process's peak resident size while it
	// verified, and ExportBytes the export's size.
	VerifyPeakRSSMiB float64 `json:"verify_peak_rss_mib"`
	ExportBytes      int64   `json:"export_bytes"`
	// Growth is, for each decade, the last point's figures over the
	// point's a decade before.
	Growth []ScaleGrowth `json:"growth"`
}

// ScalePoint is the ledger after Charges charges.
type ScalePoint struct {
	Charges int   `json:"charges"`
	Entries int64 `json:"entries"`
	// HeapMiB is the live heap above the empty ledger's, after a GC.
	HeapMiB float64 `json:"heap_mib"`
	// RSSMiB is the process's resident size, RSSAnonMiB the part of it
	// that is the process's own memory (heap, stacks) and RSSFileMiB the
	// file-backed part (the binary, bbolt's mapped pages), which the
	// kernel can drop and read again.
	RSSMiB     float64 `json:"rss_mib"`
	RSSAnonMiB float64 `json:"rss_anon_mib"`
	RSSFileMiB float64 `json:"rss_file_mib"`
	// ApplyPerS is the rate of the charges since the point before, and
	// ApplyCPUUs the process's CPU time a charge took then (checking
	// its signature, applying it, writing the history): on a loaded
	// machine the CPU time is the steadier figure.
	ApplyPerS     float64 `json:"apply_per_s"`
	ApplyCPUUs    float64 `json:"apply_cpu_us"`
	SnapshotBytes int     `json:"snapshot_bytes"`
}

// ScaleGrowth is a decade's growth: the ratios of one point's figures to
// the point's ten times fewer charges before; 0 where the earlier figure
// is 0.
type ScaleGrowth struct {
	From, To      int     `json:"-"`
	Decade        string  `json:"decade"`
	Heap          float64 `json:"heap"`
	RSS           float64 `json:"rss"`
	RSSAnon       float64 `json:"rss_anon"`
	ApplyRate     float64 `json:"apply_rate"`
	ApplyCPU      float64 `json:"apply_cpu"`
	SnapshotBytes float64 `json:"snapshot_bytes"`
}

// scaleBatch is how many charges are checked and applied together, as a
// raft batch is.
const scaleBatch = 256

// scaleKey derives a fixed key for a party of the scale ledger.
func scaleKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("nzc bench scale " + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

var scaleHospitals = []string{"h1", "h2", "h3"}

// scaleSetup is the genesis, the hospitals' accounts (caps no charge
// reaches) and the student's registration.
func scaleSetup() ([][]byte, error) {
	party := func(id string, r ledger.Role) ledger.Party {
		return ledger.Party{ID: id, Role: r, PublicKey: scaleKey(id).Public().(ed25519.PublicKey)}
	}
	ps := []ledger.Party{party("a1", ledger.RoleAuditor), party("a2", ledger.RoleAuditor), party("a3", ledger.RoleAuditor),
		party("admin", ledger.RoleAdmin), party("agg", ledger.RoleAggregator), party("s1", ledger.RoleStudent)}
	for _, h := range scaleHospitals {
		ps = append(ps, party(h, ledger.RoleHospital))
	}
	slices.SortFunc(ps, func(a, b ledger.Party) int { return strings.Compare(a.ID, b.ID) })
	var out [][]byte
	add := func(b ledger.Body, signer string) error {
		c, err := ledger.Sign(b, signer, scaleKey(signer))
		out = append(out, c)
		return err
	}
	if err := add(&ledger.Genesis{Origin: "bench/scale", Parties: ps, EpsilonBound: 1e15, DeltaBound: 1e-5, Timestamp: 1}, "admin"); err != nil {
		return nil, err
	}
	for i, h := range scaleHospitals {
		if err := add(&ledger.OpenAccount{Hospital: h, CapEpsilon: 1e15, CapDelta: 1e-5, Timestamp: int64(2 + i)}, h); err != nil {
			return nil, err
		}
	}
	return out, add(&ledger.RegisterStudent{Student: "s1", Timestamp: 9}, "admin")
}

// scaleCharges signs charges from..to−1, on every core.
func scaleCharges(ctx context.Context, from, to int, curve []float64, params []ledger.Param) ([][]byte, error) {
	out := make([][]byte, to-from)
	key := scaleKey("agg")
	err := parallel.ForEach(ctx, len(out), runtime.GOMAXPROCS(0), func(_ context.Context, i int) error {
		batch := "scale-" + strconv.Itoa(from+i)
		var err error
		out[i], err = ledger.Sign(&ledger.Charge{BatchID: batch, Student: "s1", Hospitals: scaleHospitals, Mechanism: string(mechanism.GNMax),
			Params: params, Queries: 256, Answers: 256, Curve: curve, AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: int64(10 + from + i)}, "agg", key)
		return err
	})
	return out, err
}

// liveHeap is the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// resident is this process's resident size, in all and its anonymous and
// file-backed parts, in bytes (zeros where /proc is not).
type resident struct{ all, anon, file uint64 }

func readResident() resident {
	var r resident
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return r
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "VmRSS":
			r.all = kb << 10
		case "RssAnon":
			r.anon = kb << 10
		case "RssFile":
			r.file = kb << 10
		}
	}
	return r
}

// scalePoints are 1,000 and 10,000 charges, then every 100,000, up to n,
// and n (n > 1,000).
func scalePoints(n int) []int {
	var out []int
	for _, p := range []int{1000, 10_000} {
		if p < n {
			out = append(out, p)
		}
	}
	for p := 100_000; p < n; p += 100_000 {
		out = append(out, p)
	}
	return append(out, n)
}

const mib = 1 << 20

func runScale(ctx context.Context, cfg Config, progress Progress) (ScaleSection, error) {
	sec := ScaleSection{Charges: cfg.ScaleCharges, History: cfg.ScaleHistory}
	dir, err := os.MkdirTemp("", "nzc-bench-scale-")
	if err != nil {
		return sec, err
	}
	defer os.RemoveAll(dir)

	gp := benchMechanism()
	gp.Teachers, gp.Classes = 250, 10
	cost, err := gp.Charge(mechanism.DefaultGrid(), 256, 0)
	if err != nil {
		return sec, err
	}
	curve, params := cost.RDP.Values(), gp.LedgerParams()
	setup, err := scaleSetup()
	if err != nil {
		return sec, err
	}

	base := liveHeap()
	l := &scaleLedger{path: filepath.Join(dir, "history.db")}
	if err := l.open(cfg.ScaleHistory == "disk"); err != nil {
		return sec, err
	}
	defer l.close()
	for _, c := range setup {
		if r, err := l.st.Apply(c); err != nil || r.Status != ledger.StatusAccepted {
			return sec, fmt.Errorf("setup: %s %s %v", r.Status, r.Message, err)
		}
	}
	snap, err := l.grow(ctx, cfg, &sec, base, curve, params, progress)
	if err != nil {
		return sec, err
	}
	exportPath := cmp.Or(cfg.ScaleExport, filepath.Join(dir, "ledger.export"))
	cp, err := l.export(exportPath)
	if err != nil {
		return sec, err
	}
	if err := l.restart(&sec, snap, cp); err != nil {
		return sec, err
	}
	snap = nil
	// Verify runs as nzc ledger verify does, beside no ledger: the
	// history's mapped pages would count in its resident size.
	l.close()
	err = verifyScaleExport(ctx, &sec, setup[0], exportPath, cp)
	return sec, err
}

// scaleLedger is the ledger the scale section drives, with its history on
// disk (hist set) or in memory.
type scaleLedger struct {
	path string
	hist *raftnode.History
	st   *ledger.State
}

func (l *scaleLedger) open(disk bool) error {
	if !disk {
		l.st = ledger.New()
		return nil
	}
	var err error
	if l.hist, err = raftnode.OpenHistory(l.path); err != nil {
		return err
	}
	l.st = ledger.Resume(l.hist)
	return nil
}

func (l *scaleLedger) flush() error {
	if l.hist == nil {
		return nil
	}
	return l.hist.Flush()
}

// snapshot is the raft snapshot an auditor takes: over a history on
// disk, a state snapshot (the state and the tree head); with the history
// in memory, as before it moved to disk, the whole log.
func (l *scaleLedger) snapshot() ([]byte, error) {
	if l.hist == nil {
		return l.st.Snapshot()
	}
	return l.st.StateSnapshot()
}

func (l *scaleLedger) close() {
	if l.hist != nil {
		_ = l.hist.Close()
		l.hist = nil
	}
}

// grow applies charges up to each of the section's points, measuring each
// stretch, and returns the snapshot taken at the last.
func (l *scaleLedger) grow(ctx context.Context, cfg Config, sec *ScaleSection, base uint64, curve []float64, params []ledger.Param, progress Progress) ([]byte, error) {
	points := scalePoints(cfg.ScaleCharges)
	done := 0
	var snap []byte
	for pi, target := range points {
		from := done
		busy, cpu, err := l.applyUntil(ctx, &done, target, curve, params, func(n int) { progress("scale", n, cfg.ScaleCharges) })
		if err != nil {
			return nil, err
		}
		p := ScalePoint{Charges: target, Entries: l.st.TreeSize(), ApplyPerS: float64(target-from) / busy.Seconds(),
			ApplyCPUUs: float64(cpu.Microseconds()) / float64(target-from)}
		p.HeapMiB = (float64(liveHeap()) - float64(base)) / mib
		r := readResident()
		p.RSSMiB, p.RSSAnonMiB, p.RSSFileMiB = float64(r.all)/mib, float64(r.anon)/mib, float64(r.file)/mib
		t0 := time.Now()
		b, err := l.snapshot()
		if err != nil {
			return nil, err
		}
		if pi == len(points)-1 {
			snap = b
			sec.SnapshotMs = float64(time.Since(t0).Microseconds()) / 1000
			sec.SnapshotBytes = len(b)
		}
		p.SnapshotBytes = len(b)
		sec.Points = append(sec.Points, p)
	}
	last, first := sec.Points[len(sec.Points)-1], sec.Points[0]
	sec.HeapBytesPerCharge = (last.HeapMiB - first.HeapMiB) * mib / float64(last.Charges-first.Charges)
	sec.Growth = scaleGrowth(sec.Points)
	return snap, nil
}

// applyUntil applies charges from *done up to target in batches, and
// returns the wall and CPU time the applying took.
func (l *scaleLedger) applyUntil(ctx context.Context, done *int, target int, curve []float64, params []ledger.Param, progress func(int)) (busy, cpu time.Duration, err error) {
	for *done < target {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		cmds, err := scaleCharges(ctx, *done, min(*done+scaleBatch, target), curve, params)
		if err != nil {
			return 0, 0, err
		}
		t0 := time.Now()
		c0, _ := cputime.Process()
		l.st.Preverify(cmds, runtime.GOMAXPROCS(0))
		for i, c := range cmds {
			r, err := l.st.Apply(c)
			if err != nil {
				return 0, 0, err
			}
			if r.Status != ledger.StatusAccepted {
				return 0, 0, fmt.Errorf("charge %d: %s %s %s", *done+i, r.Status, r.Code, r.Message)
			}
		}
		if err := l.flush(); err != nil {
			return 0, 0, err
		}
		busy += time.Since(t0)
		c1, _ := cputime.Process()
		cpu += c1 - c0
		*done += len(cmds)
		progress(*done)
	}
	return busy, cpu, nil
}

// export writes the ledger's export to path, with its checkpoint cosigned
// by three auditors, as an auditor streams it, and returns the checkpoint.
func (l *scaleLedger) export(path string) (ledger.Checkpoint, error) {
	cp, err := l.st.Checkpoint()
	if err != nil {
		return cp, err
	}
	var signers []note.Signer
	for _, a := range []string{"a1", "a2", "a3"} {
		s, err := ledger.NewCheckpointSigner(a, scaleKey(a), 1)
		if err != nil {
			return cp, err
		}
		signers = append(signers, s)
	}
	signed, err := ledger.SignCheckpoint(cp, signers...)
	if err != nil {
		return cp, err
	}
	f, err := os.Create(path)
	if err != nil {
		return cp, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = l.st.WriteExport(w, cp.Size, [][]byte{signed})
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return cp, err
}

// restart does what an auditor does before it serves — open its history
// and restore raft's latest snapshot over it — and times it.
func (l *scaleLedger) restart(sec *ScaleSection, snap []byte, cp ledger.Checkpoint) error {
	l.st = nil
	if l.hist != nil {
		if err := l.hist.Close(); err != nil {
			return err
		}
	}
	liveHeap()
	t0 := time.Now()
	if err := l.open(l.hist != nil); err != nil {
		return err
	}
	if err := l.st.Restore(snap); err != nil {
		return err
	}
	if err := l.flush(); err != nil {
		return err
	}
	sec.RestartMs = float64(time.Since(t0).Microseconds()) / 1000
	if l.st.RootHash() != cp.Root {
		return fmt.Errorf("the restarted ledger's root %s is not %s", l.st.RootHash(), cp.Root)
	}
	l.st = nil
	return nil
}

// verifyMemoryLimit is the soft heap limit nzc ledger verify keeps by
// default (its --memory-limit).
const verifyMemoryLimit = 200 << 20

// verifyScaleExport verifies the export file against the genesis, as
// nzc ledger verify does (read as a stream, checked on every core, under
// its default heap limit), and records the rate and the peak heap and resident size.
func verifyScaleExport(ctx context.Context, sec *ScaleSection, genesisCmd []byte, path string, cp ledger.Checkpoint) error {
	genesis, err := ledger.DecodeCommand(genesisCmd)
	if err != nil {
		return err
	}
	gh, err := genesis.Digest()
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// The heap limit nzc ledger verify keeps by default (--memory-limit).
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(verifyMemoryLimit))
	if st, err := f.Stat(); err == nil {
		sec.ExportBytes = st.Size()
	}
	liveHeap()
	peak, rss := heapSampler(), sampleRSS()
	t0 := time.Now()
	c0, _ := cputime.Process()
	rep := ledger.VerifyReader(ctx, f, ledger.VerifyOptions{GenesisHash: gh[:], Workers: runtime.GOMAXPROCS(0)})
	elapsed := time.Since(t0)
	c1, _ := cputime.Process()
	sec.VerifyPeakHeapMiB = float64(peak()) / mib
	sec.VerifyPeakRSSMiB = rss.end()
	if !rep.OK || rep.Entries != cp.Size {
		return fmt.Errorf("the export does not verify: %v", rep.Failures())
	}
	sec.VerifyEntriesPerS = float64(rep.Entries) / elapsed.Seconds()
	sec.VerifyCPUUs = float64((c1 - c0).Microseconds()) / float64(rep.Entries)
	return nil
}

// heapSampler samples the heap's objects every 10 ms until the returned
// function is called, which returns the largest sample.
func heapSampler() func() uint64 {
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() {
		metrics.Read(sample)
		if v := sample[0].Value.Uint64(); v > peak.Load() {
			peak.Store(v)
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		read()
		return peak.Load()
	}
}

// growthRatio is a/b, or 0 where b is 0: a ratio JSON can carry (no NaN
// or infinity) that says there is none.
func growthRatio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func scaleGrowth(points []ScalePoint) []ScaleGrowth {
	var out []ScaleGrowth
	ratio := growthRatio
	for i, p := range points {
		for _, q := range points[:i] {
			if q.Charges*10 != p.Charges {
				continue
			}
			out = append(out, ScaleGrowth{From: q.Charges, To: p.Charges, Decade: fmt.Sprintf("%d→%d", q.Charges, p.Charges),
				Heap: ratio(p.HeapMiB, q.HeapMiB), RSS: ratio(p.RSSMiB, q.RSSMiB), RSSAnon: ratio(p.RSSAnonMiB, q.RSSAnonMiB), ApplyRate: ratio(p.ApplyPerS, q.ApplyPerS), ApplyCPU: ratio(p.ApplyCPUUs, q.ApplyCPUUs),
				SnapshotBytes: ratio(float64(p.SnapshotBytes), float64(q.SnapshotBytes))})
		}
	}
	return out
}

// scaleTargets are the scale section's targets. The memory targets are
// for 10⁶ charges: below that, the heap is projected from the last point's
// with the bytes a charge adds, and the label says so.
func scaleTargets(sc ScaleSection) []Target {
	p := sc.Points[len(sc.Points)-1]
	heap, at := p.HeapMiB, "at 10⁶ charges"
	if sc.Charges < 1_000_000 {
		heap = p.HeapMiB + sc.HeapBytesPerCharge*float64(1_000_000-p.Charges)/mib
		at = fmt.Sprintf("projected to 10⁶ from %d", sc.Charges)
	}
	ts := []Target{
		{Name: "scale: heap above empty (MiB), " + at, Measured: heap, Goal: "≤ 128", Met: heap <= 128},
		{Name: "scale: restart to ready (s)", Measured: sc.RestartMs / 1000, Goal: "≤ 10", Met: sc.RestartMs <= 10_000},
		{Name: "scale: verify (entries/s)", Measured: sc.VerifyEntriesPerS, Goal: "≥ 50000", Met: sc.VerifyEntriesPerS >= 50_000},
		{Name: "scale: verify peak heap (MiB)", Measured: sc.VerifyPeakHeapMiB, Goal: "≤ 256", Met: sc.VerifyPeakHeapMiB <= 256},
	}
	if sc.Charges >= 1_000_000 {
		// The process's own memory is what the target is judged on; the
		// file-backed pages (bbolt's map, the binary) are the kernel's to
		// drop, and are shown beside it with them counted.
		ts = append(ts,
			Target{Name: "scale: resident memory, anonymous (MiB) at 10⁶ charges", Measured: p.RSSAnonMiB, Goal: "≤ 256", Met: p.RSSAnonMiB <= 256},
			Target{Name: "scale: resident memory with file-backed pages (MiB) at 10⁶", Measured: p.RSSMiB, Goal: "≤ 256", Met: p.RSSMiB <= 256})
	}
	if n := len(sc.Growth); n > 0 {
		g := sc.Growth[n-1].SnapshotBytes
		ts = append(ts, Target{Name: "scale: snapshot growth, last decade (×)", Measured: g, Goal: "≤ 2", Met: g <= 2})
	}
	return ts
}
