//go:build soak

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/data/synth"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/party/aggregator"
	"github.com/nzcfed/nzc/party/student"
	"github.com/nzcfed/nzc/party/teacher"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// The soak: scripts/soak.sh runs it. NZC_SOAK_QUERIES (default 100000) and
// NZC_SOAK_TIMEOUT (default 25m) change its size and its bound.
const (
	soakStudents  = 4
	soakBatch     = 50 // small batches: many requests, streams and raft commits
	soakDim       = 8
	soakClasses   = 4
	soakTeachers  = 10 // per hospital
	soakWarmUp    = 0.2
	soakGoroutine = 15 * time.Second // how long shutdown may take to end every goroutine
)

func soakProblem() synth.Blobs {
	return synth.Blobs{Classes: soakClasses, Dim: soakDim, Spread: 2, CentreSeed: [2]uint64{7, 3}}
}

// trainedVoter is a hospital's ensemble of small softmax teachers trained on
// its own synthetic records: real inference, cheap enough not to dominate.
type trainedVoter struct{ nets []*model.Network }

func (v trainedVoter) Teachers() int { return len(v.nets) }
func (trainedVoter) Classes() int    { return soakClasses }
func (trainedVoter) Dim() int        { return soakDim }
func (v trainedVoter) Votes(ctx context.Context, x []float32) ([][]int, error) {
	return ensemble.Votes(ctx, v.nets, x, soakClasses)
}

func trainVoter(t *testing.T, seed uint64) trainedVoter {
	d := soakProblem().Make(seed, 100*soakTeachers)
	shards, err := data.Partition(d.Len(), []int{soakTeachers}, seed)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ensemble.Config{
		Spec:  model.Spec{Kind: model.KindSoftmax, Input: d.Shape, Classes: soakClasses},
		Train: model.TrainConfig{Optimizer: model.Adam, LearnRate: 0.02, BatchSize: 16, Epochs: 3, MinSteps: 20},
		Seed:  seed, Workers: 1,
	}
	nets, err := ensemble.TrainTeachers(t.Context(), cfg, d, shards[0])
	if err != nil {
		t.Fatal(err)
	}
	return trainedVoter{nets: nets}
}

// raftLogCache is how many recent raft entries an auditor keeps in memory
// (party/auditor's logCacheSize).
const raftLogCache = 1024

// footprint is what the ledger keeps by design at a moment: the bytes of
// the entries each auditor holds, and each auditor's last raft index.
type footprint struct {
	entryBytes int64
	raftLast   [3]uint64
}

func (f *federation) footprint() footprint {
	var fp footprint
	st := f.machines[0].State()
	entries, err := st.Entries(0, st.TreeSize())
	if err != nil {
		f.t.Error(err)
	}
	for _, e := range entries {
		fp.entryBytes += int64(len(e))
	}
	for i, n := range f.nodes {
		fp.raftLast[i] = n.Status().LastIndex
	}
	return fp
}

// countingHandler counts the records at warning level and above, and
// passes every record to next.
type countingHandler struct {
	slog.Handler
	warnings, errors *atomic.Int64
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case r.Level >= slog.LevelError:
		h.errors.Add(1)
	case r.Level >= slog.LevelWarn:
		h.warnings.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}
func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.warnings, h.errors}
}
func (h countingHandler) WithGroup(g string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(g), h.warnings, h.errors}
}

// memory is the process's resident set from /proc/self/status: its size,
// peak, and the anonymous part (heap, stacks) apart from the file-backed one
// (mapped files, such as the auditors' bbolt logs).
type memory struct{ rss, peak, anon, file int64 }

func readMemory(t *testing.T) memory {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status to measure memory: %v", err)
	}
	defer f.Close()
	var m memory
	fields := map[string]*int64{"VmRSS": &m.rss, "VmHWM": &m.peak, "RssAnon": &m.anon, "RssFile": &m.file}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		p := fields[k]
		if !ok || p == nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		*p = n << 10
	}
	return m
}

// heapAfterGC is the live heap after a full collection.
func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// writeHeapProfile writes a heap profile to $NZC_SOAK_PROFILES/<name>.pprof
// when that variable names a directory: compare the two with
// go tool pprof -top -diff_base warm.pprof end.pprof.
func writeHeapProfile(t *testing.T, name string) {
	dir := os.Getenv("NZC_SOAK_PROFILES")
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Error(err)
	}
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < soakStudents*soakBatch {
		t.Fatalf("%s=%q: want a whole number of at least %d", name, s, soakStudents*soakBatch)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 25m", name, s)
	}
	return d
}

// TestSoak labels NZC_SOAK_QUERIES queries from 4 concurrent students
// through 3 hospitals and 3 auditors over real QUIC and raft on loopback,
// and checks: no error, memory stable after the warm-up, every goroutine
// ended at shutdown, and each hospital's ε in every auditor's ledger equal
// to a full replay of the export.
func TestSoak(t *testing.T) {
	queries := envInt(t, "NZC_SOAK_QUERIES", 100_000)
	bound := envDuration(t, "NZC_SOAK_TIMEOUT", 25*time.Minute)
	perStudent := queries / soakStudents
	queries = perStudent * soakStudents

	// Teachers are trained before the baseline: their goroutines are gone.
	var voters []trainedVoter
	for h := range 3 {
		voters = append(voters, trainVoter(t, uint64(100+h)))
	}
	runtime.GC()
	baseline := runtime.NumGoroutine()
	var warnings, errs atomic.Int64
	var report struct {
		queries, answered, refused, batches int
		duration                            time.Duration
		warmMem, endMem                     memory
		warmHeap, endHeap                   uint64
		warmKept, endKept                   footprint
		entries, entryBytes                 int64
		runErrors                           int64
		eps                                 map[string]float64
	}

	t.Run("run", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		defer cancel()
		log := slog.New(countingHandler{slog.NewTextHandler(newTWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}), &warnings, &errs})
		// Raft runs with the auditors' production timeouts (1s): the
		// tests' fast ones make elections churn on a loaded machine.
		f := newFederation(t, soakStudents, log)
		f.raftTimeout = time.Second
		m := f.m
		startAuditors(t, f)

		g := group(t)
		agg := f.startAggregator(g, "127.0.0.1:0", f.ledgerClient(), aggregator.Config{OutboxDir: t.TempDir(),
			Mechanism: mechanism.Params{Mechanism: mechanism.GNMax, Sigma: 20}, Quorum: 3, Hospitals: 3, BatchDeadline: 30 * time.Second,
			Classes: soakClasses, Ensemble: soakTeachers})
		aggAddr := agg.Addr
		hospitals := f.startHospitals(g, agg, 1e6, func(i int) teacher.Voter { return voters[i] })
		backoff := quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond}

		var done atomic.Int64 // batches labelled, over every student
		warmAt := int64(math.Ceil(soakWarmUp * float64(queries) / soakBatch))
		warm := make(chan struct{})
		var warmOnce sync.Once
		type outcome struct {
			res *student.Result
			err error
		}
		outs := make([]outcome, soakStudents)
		start := time.Now()
		var wg sync.WaitGroup
		for i, p := range m.ByRole(crypto.RoleStudent) {
			st, err := student.New(student.Config{ID: p.ID, Aggregator: aggAddr, Net: f.net(p), Identity: f.identity(p), AuditorKeys: f.auditorKeys(),
				Hospitals: hospitals, BatchSize: soakBatch, StateDir: t.TempDir(), Backoff: backoff, Logger: log.With("party", p.ID)})
			if err != nil {
				t.Fatal(err)
			}
			d := soakProblem().Make(uint64(1000+i), perStudent)
			wg.Go(func() {
				res, err := st.Label(ctx, d, func(int, int) {
					if done.Add(1) == warmAt {
						warmOnce.Do(func() { close(warm) })
					}
				})
				outs[i] = outcome{res, err}
			})
		}
		// Memory after the warm-up, measured while the students run.
		measured := make(chan struct{})
		go func() {
			defer close(measured)
			select {
			case <-warm:
				report.warmKept = f.footprint()
				report.warmHeap = heapAfterGC()
				report.warmMem = readMemory(t)
				writeHeapProfile(t, "warm")
			case <-ctx.Done():
			}
		}()
		wg.Wait()
		report.duration = time.Since(start)
		warmOnce.Do(func() { close(warm) })
		<-measured
		report.endKept = f.footprint()
		report.endHeap = heapAfterGC()
		report.endMem = readMemory(t)
		writeHeapProfile(t, "end")
		report.queries = queries

		for i, o := range outs {
			if o.err != nil {
				errs.Add(1)
				t.Errorf("student %d: %v", i+1, o.err)
				continue
			}
			report.answered += o.res.Answered
			report.refused += o.res.Refused
			report.batches += len(o.res.Batches)
		}

		// Every auditor's accounts equal a replay of the exported log, which
		// verifies against the auditors' own checkpoint signatures.
		charges := f.charges()
		if len(charges) != report.batches {
			t.Errorf("%d charges in the ledger for %d delivered batches", len(charges), report.batches)
		}
		cp, err := f.auditors[0].CosignCheckpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		export, err := f.machines[0].State().Export([][]byte{cp})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, a := range m.ByRole(crypto.RoleAuditor) {
			k := cryptotest.SigningKey(t, m, a)
			vk, err := ledger.VerifierKey(a.ID, k.Public().(ed25519.PublicKey))
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, vk)
		}
		if r := ledger.Verify(export, ledger.VerifyOptions{TrustedKeys: keys, Unpinned: true}); len(r.Failures()) > 0 {
			var b bytes.Buffer
			_ = r.WriteText(&b)
			t.Fatalf("the export does not verify:\n%s", b.String())
		}
		x, err := ledger.DecodeExport(export)
		if err != nil {
			t.Fatal(err)
		}
		replayed, err := ledger.Replay(x.Entries)
		if err != nil {
			t.Fatal(err)
		}
		report.entries = int64(len(x.Entries))
		for _, e := range x.Entries {
			report.entryBytes += int64(len(e))
		}
		report.eps = map[string]float64{}
		for _, want := range replayed.Accounts() {
			report.eps[want.Hospital] = want.Epsilon
			if want.Answers != uint64(report.answered) {
				t.Errorf("%s: %d answers charged, %d delivered", want.Hospital, want.Answers, report.answered)
			}
			for i, mach := range f.machines {
				got, ok := mach.State().Account(want.Hospital)
				if !ok || got.Epsilon != want.Epsilon || got.Charges != want.Charges || got.Answers != want.Answers {
					t.Errorf("auditor %d: %s ε %v over %d charges, the replay gives ε %v over %d", i+1, want.Hospital, got.Epsilon, got.Charges, want.Epsilon, want.Charges)
				}
			}
		}
		// Errors count until shutdown: a raft leader that outlives a
		// stopped follower logs its failed heartbeats.
		report.runErrors = errs.Load()
	})

	// Shutdown: every goroutine the federation started must end.
	var left int
	deadline := time.Now().Add(soakGoroutine)
	for {
		left = runtime.NumGoroutine()
		if left <= baseline || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if left > baseline {
		var dump bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
		t.Errorf("%d goroutines %v after shutdown, %d before the federation started:\n%s", left, soakGoroutine, baseline, dump.String())
	}

	if report.runErrors != 0 {
		t.Errorf("%d errors during the run", report.runErrors)
	}
	if report.refused != 0 || report.answered != report.queries {
		t.Errorf("%d of %d queries answered, %d refused", report.answered, report.queries, report.refused)
	}
	// The live heap after the warm-up may grow only by what the run keeps
	// by design: each auditor's copy of the ledger entries, each auditor's
	// raft log cache until it holds its last raftLogCache entries, and the
	// students' records of their batches (under 1 KiB a batch). A leaked
	// connection, stream, goroutine or record per batch shows as more.
	wk, ek := report.warmKept, report.endKept
	batchesAfter := (1 - soakWarmUp) * float64(report.batches)
	kept := 3*float64(ek.entryBytes-wk.entryBytes) + 1024*batchesAfter
	for i := range ek.raftLast {
		added := ek.raftLast[i] - wk.raftLast[i]
		if added == 0 {
			continue
		}
		// A raft entry packs the commands of the ledger entries applied
		// with it, a little less than those entries' bytes.
		perRaftEntry := float64(ek.entryBytes-wk.entryBytes) / float64(added)
		filled := min(ek.raftLast[i], raftLogCache) - min(wk.raftLast[i], raftLogCache)
		kept += float64(filled) * perRaftEntry
	}
	growth := float64(int64(report.endHeap) - int64(report.warmHeap))
	if report.warmHeap == 0 || growth > kept {
		t.Errorf("live heap %s after the warm-up, %s at the end: %+.1f KiB per batch, more than the %.1f KiB the ledger, raft's log cache and the students keep",
			mib(int64(report.warmHeap)), mib(int64(report.endHeap)), growth/batchesAfter/1024, kept/batchesAfter/1024)
	}

	t.Logf("soak: %d queries (%d answered, %d refused) in %d batches from %d students through 3 hospitals and 3 auditors in %v (%.0f queries/s)",
		report.queries, report.answered, report.refused, report.batches, soakStudents, report.duration.Round(time.Millisecond), float64(report.queries)/report.duration.Seconds())
	w, e := report.warmMem, report.endMem
	t.Logf("soak: RSS %s after the warm-up (%.0f%% of the batches; %s anonymous, %s mapped files), %s at the end (%s anonymous, %s mapped files), peak %s",
		mib(w.rss), soakWarmUp*100, mib(w.anon), mib(w.file), mib(e.rss), mib(e.anon), mib(e.file), mib(e.peak))
	t.Logf("soak: live heap %s after the warm-up, %s at the end: %+.1f KiB per batch after the warm-up, bound %.1f KiB (ledger entries, raft log caches filling, students' records)",
		mib(int64(report.warmHeap)), mib(int64(report.endHeap)), growth/batchesAfter/1024, kept/batchesAfter/1024)
	t.Logf("soak: errors %d during the run (Label failures and error logs), %d during shutdown; warnings logged %d", report.runErrors, errs.Load()-report.runErrors, warnings.Load())
	t.Logf("soak: goroutines %d before the federation, %d after shutdown", baseline, left)
	t.Logf("soak: ledger %d entries; ε per hospital (δ=1e-5) equal in all 3 auditors and in the replay of the export: %v", report.entries, report.eps)
}
