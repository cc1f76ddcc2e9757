package main

import (
	"encoding/json"
	"github.com/nzcfed/nzc/bench"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/cmd/internal/clitest"
)

// benchJSON runs nzc bench --quick with args and a data directory of the
// test's own, decodes its JSON report into rep, and returns what it wrote
// on standard error (its progress).
func benchJSON(t *testing.T, rep any, args ...string) string {
	t.Helper()
	args = append(append([]string{"bench", "--quick"}, args...), "--data", t.TempDir(), "--format", "json")
	out, progress, err := clitest.ExecuteSplit(t, newRootCommand(), args...)
	if err != nil {
		t.Fatalf("nzc %s: %v\n%s\n%s", strings.Join(args, " "), err, out, progress)
	}
	if err := json.Unmarshal([]byte(out), rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return progress
}

// TestBenchJSON runs a tiny bench through the command and checks the JSON
// shape promised to report readers, and that every figure is a positive,
// finite number measured the asked number of times.
func TestBenchJSON(t *testing.T) {
	var rep map[string]any
	progress := benchJSON(t, &rep, "--reps", "2", "--teachers", "3",
		"--e2e-queries", "16", "--batch", "8", "--charges", "20", "--inference-queries", "8",
		"--mechanism-queries", "50", "--analysis-queries", "100")
	// Standard error is not a terminal here: each step is a plain line.
	for _, step := range []string{"mechanism: 8 of 8 steps", "inference: 3 of 3 steps", "ledger: 2 of 2 steps", "e2e: 2 of 2 steps"} {
		if !strings.Contains(progress, step) {
			t.Errorf("progress on standard error lacks %q:\n%s", step, progress)
		}
	}
	figure := func(path ...string) {
		t.Helper()
		var v any = rep
		for _, k := range path {
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: %v is not an object", path, v)
			}
			if v, ok = m[k]; !ok {
				t.Fatalf("%v: no key %q in %v", path, k, m)
			}
		}
		f, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%v: %v is not a figure", path, v)
		}
		med, _ := f["median"].(float64)
		reps, _ := f["reps"].(float64)
		lo, _ := f["min"].(float64)
		hi, _ := f["max"].(float64)
		vals, _ := f["values"].([]any)
		if !(med > 0) || math.IsInf(med, 0) || reps != 2 || len(vals) != 2 || !(lo <= med && med <= hi) {
			t.Errorf("%v: %v, want a positive finite median within [min, max] over 2 reps", path, f)
		}
	}
	for _, name := range []string{"nzc-laplace", "nzc-gaussian", "lnmax", "gnmax", "confident-gnmax", "nzc-svt"} {
		figure("mechanism", "answers_per_s", name)
	}
	figure("mechanism", "analysis", "data_independent_ms")
	figure("mechanism", "analysis", "gnmax_data_dependent_ms")
	figure("ledger", "charges_per_s")
	figure("ledger", "p50_ms")
	figure("ledger", "p99_ms")
	figure("ledger", "without_proofs", "charges_per_s")
	figure("ledger", "without_proofs", "p99_ms")
	figure("ledger", "proof_cost_ratio")
	figure("inference", "gemm_gflops")
	for _, m := range []string{"mlp", "cnn"} {
		figure("inference", m, "votes_per_s")
		figure("inference", m, "gflops")
		figure("inference", m, "fraction_of_gemm")
	}
	figure("inference", "mlp", "dense", "votes_per_s")
	figure("inference", "mlp", "dense", "fraction_of_gemm")
	figure("e2e", "federation_labels_per_s")
	figure("e2e", "inprocess_labels_per_s")
	figure("e2e", "ratio")
	if runtime.GOOS == "linux" {
		figure("e2e", "cpu_ratio")
		figure("e2e", "federation_cpu_ms_per_label")
		figure("e2e", "inprocess_cpu_ms_per_label")
	}
	if ts, _ := rep["targets"].([]any); len(ts) != 5 {
		t.Errorf("targets: %v, want the 5 targets", rep["targets"])
	}
}

// TestBenchWAN runs the wan section small: every scenario labels every
// batch, none is lost or charged twice, and the impaired links add at least
// their delay (a student's batch crosses its own link at least once each
// way, 2 × (40 − 5) ms).
func TestBenchWAN(t *testing.T) {
	var rep struct {
		WAN struct {
			Scenarios []struct {
				Name  string  `json:"name"`
				P50   float64 `json:"p50_batch_ms"`
				Lost  int     `json:"batches_lost"`
				Twice int     `json:"batches_charged_twice"`
			} `json:"scenarios"`
			Batches int `json:"batches_per_rep"`
		} `json:"wan"`
	}
	benchJSON(t, &rep, "--sections", "wan", "--reps", "1", "--teachers", "3", "--wan-queries", "16", "--wan-batch", "8")
	if len(rep.WAN.Scenarios) != 3 || rep.WAN.Batches != 2 {
		t.Fatalf("want 3 scenarios of 2 batches, got %+v", rep.WAN)
	}
	for i, sc := range rep.WAN.Scenarios {
		if sc.Lost != 0 || sc.Twice != 0 {
			t.Errorf("%s: %d batches lost, %d charged twice", sc.Name, sc.Lost, sc.Twice)
		}
		if i > 0 && sc.P50 < 70 {
			t.Errorf("%s: p50 batch latency %.1f ms, below the link's own round trip", sc.Name, sc.P50)
		}
	}
}

// The hostile section runs the honest student beside the hostile hospital:
// every attack is tried and refused (no junk Hello or forbidden frame is
// served, the relay flood is limited, extra connections are refused), and
// no honest batch is lost or charged twice. The figures themselves are
// the machine's; only their presence is checked here.
func TestBenchHostile(t *testing.T) {
	var rep struct {
		Hostile struct {
			Honest   struct{ Median float64 } `json:"honest_labels_per_s"`
			Attacked struct{ Median float64 } `json:"under_attack_labels_per_s"`
			PeakRSS  float64                  `json:"attack_peak_rss_mib"`
			Attacks  bench.HostileAttacks     `json:"attacks"`
			Stalling struct{ Median float64 } `json:"stalling_labels_per_s"`
			Ratio    float64                  `json:"stalling_ratio"`
			Lost     int                      `json:"batches_lost"`
			Twice    int                      `json:"batches_charged_twice"`
			SVTBurn  bench.SVTBurn            `json:"svt_burn"`
		} `json:"hostile"`
	}
	benchJSON(t, &rep, "--sections", "hostile", "--reps", "1", "--teachers", "3", "--e2e-queries", "64", "--batch", "8", "--batch-deadline", "2s")
	h := rep.Hostile
	if h.Honest.Median <= 0 || h.Attacked.Median <= 0 || h.Stalling.Median <= 0 || h.Ratio <= 0 || h.Lost != 0 || h.Twice != 0 {
		t.Fatalf("honest %v labels/s, under attack %v, beside a stalling hospital %v (ratio %v), lost %d, charged twice %d",
			h.Honest.Median, h.Attacked.Median, h.Stalling.Median, h.Ratio, h.Lost, h.Twice)
	}
	a := h.Attacks
	if a.Hellos == 0 || a.HellosAccepted != 0 || a.Oversized == 0 || a.OversizedServed != 0 || a.Relays == 0 {
		t.Fatalf("attacks %+v: want junk Hellos and frames tried and none served", a)
	}
	if a.Relays > 8 && a.RelaysLimited == 0 {
		t.Fatalf("attacks %+v: %d relays, none limited", a, a.Relays)
	}
	// A hospital voting against the others costs them at most one
	// nzc-svt session's ε.
	if b := h.SVTBurn; !(b.SessionEpsilon > 0) || b.HonestMaxEpsilon > b.SessionEpsilon*(1+1e-9) {
		t.Fatalf("svt burn %+v: want the honest hospitals' ε within one session's, which is positive", b)
	}
}

// The scale section drives the ledger over each history, reports a point
// per decade and the end's figures, and its ledger over the disk history
// holds well under the bytes of an entry (about 1,500 for these charges)
// in the heap per charge — nothing, within the GC's noise either way —
// where the one in memory holds more.
func TestBenchScale(t *testing.T) {
	for _, tc := range []struct {
		history  string
		min, max float64 // heap bytes a charge
	}{{"disk", -800, 800}, {"memory", 1200, math.Inf(1)}} {
		t.Run(tc.history, func(t *testing.T) {
			var rep struct {
				Scale bench.ScaleSection `json:"scale"`
			}
			benchJSON(t, &rep, "--sections", "scale", "--scale-charges", "2000", "--scale-history", tc.history)
			sc := rep.Scale
			if sc.Charges != 2000 || sc.History != tc.history || len(sc.Points) != 2 || sc.Points[1].Entries != 2005 {
				t.Fatalf("scale section %+v", sc)
			}
			if sc.HeapBytesPerCharge < tc.min || sc.HeapBytesPerCharge > tc.max {
				t.Errorf("%.0f heap bytes a charge, want within [%.0f, %.0f]", sc.HeapBytesPerCharge, tc.min, tc.max)
			}
			for name, v := range map[string]float64{"snapshot bytes": float64(sc.SnapshotBytes), "restart ms": sc.RestartMs,
				"verify rate": sc.VerifyEntriesPerS, "apply rate": sc.Points[1].ApplyPerS} {
				if !(v > 0) || math.IsInf(v, 0) {
					t.Errorf("%s = %v", name, v)
				}
			}
			if runtime.GOOS == "linux" {
				for _, p := range sc.Points {
					// VmRSS is RssAnon + RssFile + RssShmem, each read once.
					if !(p.RSSAnonMiB > 0 && p.RSSFileMiB > 0 && p.RSSAnonMiB+p.RSSFileMiB <= p.RSSMiB+1) {
						t.Errorf("%d charges: resident %.1f MiB, anonymous %.1f, file-backed %.1f", p.Charges, p.RSSMiB, p.RSSAnonMiB, p.RSSFileMiB)
					}
				}
				if !(sc.VerifyPeakRSSMiB > 0) || sc.ExportBytes <= 0 {
					t.Errorf("verify's peak resident %.1f MiB of a %d-byte export", sc.VerifyPeakRSSMiB, sc.ExportBytes)
				}
			}
		})
	}
}

// The federation section runs a federation of each size with the same
// teachers split over its hospitals: every size labels its queries,
// against the in-process pipeline, and the ledger's charges name every
// hospital, so a charge grows with the hospitals while its bytes per
// hospital shrink. The figures themselves are the machine's; only their
// presence and the sizes' order are checked here.
func TestBenchFederation(t *testing.T) {
	var rep struct {
		Federation bench.FederationSection `json:"federation"`
		Targets    []bench.Target          `json:"targets"`
	}
	benchJSON(t, &rep, "--sections", "federation", "--reps", "2", "--federation-hospitals", "2,5",
		"--federation-teachers", "10", "--federation-queries", "32", "--batch", "8")
	fd := rep.Federation
	if fd.Teachers != 10 || fd.Queries != 32 || len(fd.Points) != 2 || len(fd.Growth) != 1 {
		t.Fatalf("federation section %+v", fd)
	}
	for i, p := range fd.Points {
		if want := []int{2, 5}[i]; p.Hospitals != want {
			t.Fatalf("point %d is of %d hospitals, want %d", i, p.Hospitals, want)
		}
		if p.LabelsPerS.Reps != 2 || p.Ratio.Reps != 2 || p.Charges < 2*32/8 {
			t.Errorf("%d hospitals: %d and %d reps, %d charges; want 2 reps and a charge a batch", p.Hospitals, p.LabelsPerS.Reps, p.Ratio.Reps, p.Charges)
		}
		for name, v := range map[string]float64{"labels/s": p.LabelsPerS.Median, "in-process labels/s": p.InprocessLabelsPerS.Median,
			"ratio": p.Ratio.Median, "charge bytes": p.ChargeBytes, "apply µs": p.ApplyUsPerCharge, "apply rate": p.ApplyChargesPerS,
			"peak heap": p.PeakHeapMiB} {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Errorf("%d hospitals: %s = %v", p.Hospitals, name, v)
			}
		}
		if math.Abs(p.ChargeBytesPerHospital*float64(p.Hospitals)-p.ChargeBytes) > 1e-9*p.ChargeBytes {
			t.Errorf("%d hospitals: %v bytes a hospital of a %v-byte charge", p.Hospitals, p.ChargeBytesPerHospital, p.ChargeBytes)
		}
	}
	a, b := fd.Points[0], fd.Points[1]
	if !(b.ChargeBytes > a.ChargeBytes && b.ChargeBytesPerHospital < a.ChargeBytesPerHospital) {
		t.Errorf("charges of %v bytes (%v a hospital) with 2 hospitals and %v (%v) with 5: want larger charges, fewer bytes a hospital",
			a.ChargeBytes, a.ChargeBytesPerHospital, b.ChargeBytes, b.ChargeBytesPerHospital)
	}
	if n := len(rep.Targets); n != 1 || !strings.Contains(rep.Targets[0].Name, "5 hospitals") {
		t.Errorf("targets %+v, want the largest federation's", rep.Targets)
	}
}
