package mechanism

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

// testdata/pate_reference.json holds values computed by
// testdata/pate_reference.py from PATE 2018's formulas with numpy/scipy.
type pateReference struct {
	Orders []float64 `json:"orders"`
	GNMax  []struct {
		Hist     Histogram `json:"hist"`
		Teachers int       `json:"teachers"`
		Sigma    float64   `json:"sigma"`
		LogQ     float64   `json:"logq"`
		RDP      []float64 `json:"rdp"`
		RDPInd   []float64 `json:"rdp_ind"`
	} `json:"gnmax"`
	Composition struct {
		Sigma         float64     `json:"sigma"`
		Hists         []Histogram `json:"hists"`
		RDP           []float64   `json:"rdp"`
		Delta         float64     `json:"delta"`
		EpsClassic    float64     `json:"eps_classic"`
		EpsClassicInd float64     `json:"eps_classic_ind"`
	} `json:"composition"`
	Threshold []struct {
		Hist      Histogram `json:"hist"`
		Threshold float64   `json:"threshold"`
		Sigma1    float64   `json:"sigma1"`
		LogPr     float64   `json:"logpr"`
		RDP       []float64 `json:"rdp"`
	} `json:"threshold"`
	LogQ0 []struct {
		Sigma, Order, LogQ0 float64
	} `json:"logq0"`
	LocalSensitivity []struct {
		Hist     Histogram `json:"hist"`
		Teachers int       `json:"teachers"`
		Sigma    float64   `json:"sigma"`
		Order    float64   `json:"order"`
		LS       []float64 `json:"ls"`
	} `json:"local_sensitivity"`
	LocalSensitivityThreshold []struct {
		Hist      Histogram `json:"hist"`
		Teachers  int       `json:"teachers"`
		Threshold float64   `json:"threshold"`
		Sigma1    float64   `json:"sigma1"`
		Order     float64   `json:"order"`
		LS        []float64 `json:"ls"`
	} `json:"local_sensitivity_threshold"`
	GNSS []struct {
		Beta, Sigma, Order, RDP float64
	} `json:"gnss"`
}

func loadReference(t *testing.T) pateReference {
	t.Helper()
	b, err := os.ReadFile("testdata/pate_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var r pateReference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

const refTol = 1e-7 // the target is 1e-6 relative

func closeRel(got, want, tol float64) bool {
	if got == want {
		return true
	}
	return math.Abs(got-want) <= tol*math.Max(math.Abs(want), 1e-300)
}

func TestGNMaxDataDependentMatchesReference(t *testing.T) {
	r := loadReference(t)
	g := must(NewGrid(r.Orders))
	for i, c := range r.GNMax {
		lq := LogQGaussian(c.Hist, c.Sigma)
		if !closeRel(lq, c.LogQ, refTol) {
			t.Errorf("case %d %v σ=%v: logq = %v, want %v", i, c.Hist, c.Sigma, lq, c.LogQ)
		}
		dd := must(RDPGaussian(g, lq, c.Sigma))
		ind := RDPDataIndependentGaussian(g, c.Sigma)
		for k := range r.Orders {
			if !closeRel(dd.At(k), c.RDP[k], refTol) {
				t.Errorf("case %d %v σ=%v order %v: data-dependent RDP %v, want %v", i, c.Hist, c.Sigma, r.Orders[k], dd.At(k), c.RDP[k])
			}
			if !closeRel(ind.At(k), c.RDPInd[k], 1e-14) {
				t.Errorf("case %d order %v: data-independent RDP %v, want %v", i, r.Orders[k], ind.At(k), c.RDPInd[k])
			}
		}
	}
	cp := r.Composition
	tot, _, err := GNMaxDataDependent(g, cp.Hists, cp.Sigma)
	if err != nil {
		t.Fatal(err)
	}
	for k := range r.Orders {
		if !closeRel(tot.At(k), cp.RDP[k], refTol) {
			t.Errorf("composition order %v: %v, want %v", r.Orders[k], tot.At(k), cp.RDP[k])
		}
	}
	conv := must(tot.EpsilonClassic(cp.Delta))
	if !closeRel(conv.Epsilon, cp.EpsClassic, refTol) {
		t.Errorf("classic ε = %v, want %v", conv.Epsilon, cp.EpsClassic)
	}
	ch := must(Params{Mechanism: GNMax, Teachers: 1000, Sigma: cp.Sigma}.Charge(g, len(cp.Hists), 0))
	if conv := must(ch.RDP.EpsilonClassic(cp.Delta)); !closeRel(conv.Epsilon, cp.EpsClassicInd, refTol) {
		t.Errorf("data-independent classic ε = %v, want %v", conv.Epsilon, cp.EpsClassicInd)
	}
	// The data-dependent bound never exceeds the data-independent one.
	for k := range r.Orders {
		if tot.At(k) > ch.RDP.At(k) {
			t.Errorf("order %v: data-dependent %v above data-independent %v", r.Orders[k], tot.At(k), ch.RDP.At(k))
		}
	}
}

func TestThresholdMatchesReference(t *testing.T) {
	r := loadReference(t)
	g := must(NewGrid(r.Orders))
	for i, c := range r.Threshold {
		lp := LogPrAnswered(c.Hist, c.Threshold, c.Sigma1)
		if !closeRel(lp, c.LogPr, refTol) {
			t.Errorf("case %d: log P[answered] = %v, want %v", i, lp, c.LogPr)
		}
		rd := must(RDPThreshold(g, lp, c.Sigma1))
		for k := range r.Orders {
			if !closeRel(rd.At(k), c.RDP[k], refTol) {
				t.Errorf("case %d order %v: threshold RDP %v, want %v", i, r.Orders[k], rd.At(k), c.RDP[k])
			}
		}
	}
}

func TestSmoothSensitivityMatchesReference(t *testing.T) {
	r := loadReference(t)
	for _, c := range r.LogQ0 {
		got := must(LogQ0(c.Sigma, c.Order))
		if !closeRel(got, c.LogQ0, refTol) {
			t.Errorf("logq0(σ=%v, λ=%v) = %v, want %v", c.Sigma, c.Order, got, c.LogQ0)
		}
	}
	for i, c := range r.LocalSensitivity {
		ls := must(LocalSensitivityGNMax(c.Hist, c.Teachers, c.Sigma, c.Order))
		if len(ls) != len(c.LS) {
			t.Fatalf("case %d: %d distances, want %d", i, len(ls), len(c.LS))
		}
		for d := range ls {
			if !closeRel(ls[d], c.LS[d], 1e-6) && math.Abs(ls[d]-c.LS[d]) > 1e-12 {
				t.Errorf("case %d %v σ=%v λ=%v d=%d: LS %v, want %v", i, c.Hist, c.Sigma, c.Order, d, ls[d], c.LS[d])
			}
		}
	}
	for i, c := range r.LocalSensitivityThreshold {
		ls := must(LocalSensitivityThreshold(c.Hist, c.Teachers, c.Threshold, c.Sigma1, c.Order))
		if len(ls) != len(c.LS) {
			t.Fatalf("threshold case %d: %d distances, want %d", i, len(ls), len(c.LS))
		}
		for d := range ls {
			if !closeRel(ls[d], c.LS[d], 1e-6) && math.Abs(ls[d]-c.LS[d]) > 1e-12 {
				t.Errorf("threshold case %d d=%d: LS %v, want %v", i, d, ls[d], c.LS[d])
			}
		}
	}
	if len(r.LocalSensitivityThreshold) == 0 {
		t.Fatal("no threshold reference values")
	}
	for _, c := range r.GNSS {
		got := must(RDPSmoothSensitivityGaussian(c.Beta, c.Sigma, c.Order))
		if !closeRel(got, c.RDP, 1e-12) {
			t.Errorf("GNSS RDP(β=%v, σ=%v, λ=%v) = %v, want %v", c.Beta, c.Sigma, c.Order, got, c.RDP)
		}
	}
	if _, err := RDPSmoothSensitivityGaussian(0.1, 1, 6); err == nil {
		t.Error("GNSS accepted λ ≥ 1/(2β)")
	}
}

func TestErfcinvAccurate(t *testing.T) {
	for _, y := range []float64{-2, -0.5, 0, 0.3, 1, 3, 6, 10, 20, 26} {
		x := math.Exp(logErfc(y))
		if got := erfcinv(x); math.Abs(got-y) > 1e-9*math.Max(1, math.Abs(y)) {
			t.Errorf("erfcinv(erfc(%v)) = %v", y, got)
		}
	}
}

func TestReleaseSmoothSensitivity(t *testing.T) {
	p := Params{Mechanism: GNMax, Teachers: 250, Sigma: 40}
	var hs []Histogram
	for i := range 200 {
		hs = append(hs, Histogram{240 - i%50, 5 + i%50, 5})
	}
	ssp := SmoothSensitivityParams{Order: 20, Sigma: 10}
	rel, err := ReleaseSmoothSensitivity(seeded(21), p, hs, ssp, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	if rel.Beta != 0.02 || rel.SmoothSensitivity <= 0 || rel.ReleaseCost <= 0 {
		t.Fatalf("release %+v", rel)
	}
	g := must(NewGrid([]float64{20}))
	dd, _, _ := GNMaxDataDependentBound(g, hs, 40, QDiscrete)
	if !closeRel(rel.DataDependent, dd.At(0), 1e-12) || rel.Bound != QDiscrete {
		t.Fatalf("data-dependent %v (%s), want %v with the discrete bound", rel.DataDependent, rel.Bound, dd.At(0))
	}
	// With PATE's continuous bound the release uses PATE's figures.
	cssp := ssp
	cssp.Bound = QContinuous
	crel0, err := ReleaseSmoothSensitivity(seeded(21), p, hs, cssp, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	cdd, _, _ := GNMaxDataDependent(g, hs, 40)
	if !closeRel(crel0.DataDependent, cdd.At(0), 1e-12) || crel0.DataDependent > rel.DataDependent {
		t.Fatalf("continuous data-dependent %v, want %v (≤ discrete %v)", crel0.DataDependent, cdd.At(0), rel.DataDependent)
	}
	// Same seed, same release; the release is RDP + SS·σ_s·Z.
	rel2, _ := ReleaseSmoothSensitivity(seeded(21), p, hs, ssp, 1e-5)
	if rel2 != rel {
		t.Fatal("release is not a function of the source")
	}
	if z := (rel.Released - rel.DataDependent) / (rel.SmoothSensitivity * 10); math.Abs(z) > 6 {
		t.Fatalf("noise %v standard deviations", z)
	}
	// The unperturbed ε differs from the published one by exactly the noise
	// (the conversion at a fixed order is a shift), and its noise is SS·σ_s.
	if rel.Epsilon > 0 && !closeRel(rel.UnsafeDataDependentEpsilon()-rel.Epsilon, rel.DataDependent-rel.Released, 1e-9) {
		t.Fatalf("unperturbed ε %v, published %v: differ by %v, want the noise %v",
			rel.UnsafeDataDependentEpsilon(), rel.Epsilon, rel.UnsafeDataDependentEpsilon()-rel.Epsilon, rel.DataDependent-rel.Released)
	}
	if rel.UnsafeNoiseSD() != rel.SmoothSensitivity*10 {
		t.Fatalf("noise sd %v, want SS·σ_s = %v", rel.UnsafeNoiseSD(), rel.SmoothSensitivity*10)
	}
	// The release stays within [0, data-independent RDP], whatever the noise.
	small := []Histogram{{3, 0}, {2, 1}}
	sp := Params{Mechanism: GNMax, Teachers: 3, Sigma: 0.5}
	for seed := range uint64(30) {
		r, err := ReleaseSmoothSensitivity(seeded(seed), sp, small, SmoothSensitivityParams{Order: 2, Sigma: 10}, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		if r.Released < 0 || r.Released > 2*2/0.25*(1+1e-12) {
			t.Fatalf("released %v outside [0, %v]", r.Released, 2*2/0.25)
		}
	}
	cp := Params{Mechanism: ConfidentGNMax, Teachers: 250, Sigma1: 150, Sigma2: 40, Threshold: 200}
	crel, err := ReleaseSmoothSensitivity(seeded(22), cp, hs, ssp, 1e-5)
	if err != nil || crel.SmoothSensitivity <= 0 {
		t.Fatalf("confident release %+v, %v", crel, err)
	}
	if _, err := ReleaseSmoothSensitivity(seeded(22), Params{Mechanism: LNMax, Teachers: 250, Scale: 1}, hs, ssp, 1e-5); err == nil {
		t.Fatal("smooth sensitivity of lnmax accepted")
	}
}

// The discrete bound is an upper bound on the exact error probability of
// GNMax with discrete Gaussian noise (computed by summing the PMF), where
// PATE's continuous formula is not.
func TestLogQDiscreteIsAnUpperBound(t *testing.T) {
	continuousFails := false
	for _, sigma := range []float64{0.3, 0.5, 0.8, 1, 2, 4} {
		r := int(12*sigma) + 3
		for _, h := range []Histogram{{5, 5}, {5, 4}, {4, 5}, {6, 4, 4}, {3, 6, 1}, {9, 1, 0, 0}, {7, 5, 6}} {
			p := exactProbs(h, -1, 0, gaussPMF(sigma), r)
			q := 0.0
			for j, v := range p {
				if j != h.Top() {
					q += v
				}
			}
			if q <= 1e-300 {
				continue
			}
			if lq := LogQDiscreteGaussian(h, sigma); lq < math.Log(q)-1e-12 {
				t.Errorf("σ=%v %v: discrete bound log q̃ = %v below the exact log q = %v", sigma, h, lq, math.Log(q))
			}
			if LogQGaussian(h, sigma) < math.Log(q) {
				continuousFails = true
			}
		}
	}
	if !continuousFails {
		t.Log("the continuous formula happened to bound every case")
	}
	// Theorem 6 with the discrete bound is never above the data-independent bound.
	g := DefaultGrid()
	c, _, err := GNMaxDataDependentBound(g, []Histogram{{200, 30, 20}, {125, 125, 0}}, 40, QDiscrete)
	if err != nil {
		t.Fatal(err)
	}
	ind := RDPDataIndependentGaussian(g, 40)
	for i := range g.Len() {
		if c.At(i) > 2*ind.At(i) {
			t.Fatalf("order %v: %v above 2·%v", g.Order(i), c.At(i), ind.At(i))
		}
	}
}

// The discrete threshold bound holds against the exact probabilities.
func TestThresholdDiscreteBound(t *testing.T) {
	for _, sigma1 := range []float64{0.5, 1, 3} {
		pmf := gaussPMF(sigma1)
		r := int(15*sigma1) + 3
		for _, th := range []float64{-2, 0, 2.5, 5, 9} {
			for v := 0; v <= 6; v++ {
				m := int(math.Ceil(th - float64(v)))
				pAns := 0.0
				for z := max(m, -r); z <= r; z++ {
					pAns += pmf(z)
				}
				q := min(pAns, 1-pAns)
				if q <= 1e-300 {
					continue
				}
				if lq := thresholdLogQ(QDiscrete, v, th, sigma1); lq < math.Log(q)-1e-9 {
					t.Errorf("σ1=%v T=%v v=%d: bound %v below exact %v", sigma1, th, v, lq, math.Log(q))
				}
			}
		}
	}
}

// With σ so small that q̃₀ underflows, the smooth sensitivity is capped at
// λ/σ² per query instead of becoming NaN, and the release stays a number
// (clamped to the data-independent RDP).
func TestSmoothSensitivityTinySigma(t *testing.T) {
	hs := []Histogram{{3, 0, 0, 0}, {2, 1, 0, 0}, {1, 1, 1, 0}}
	for _, p := range []Params{
		{Mechanism: GNMax, Teachers: 3, Sigma: 0.48},
		{Mechanism: ConfidentGNMax, Teachers: 3, Threshold: 2.4, Sigma1: 1.44, Sigma2: 0.48},
	} {
		t.Run(string(p.Mechanism), func(t *testing.T) {
			ss, _, err := SmoothSensitivity(p, hs, 20, 0.02, QDiscrete)
			if err != nil {
				t.Fatal(err)
			}
			if limit := float64(len(hs)) * 20 / (0.48 * 0.48); !(ss > 0 && ss <= limit) {
				t.Fatalf("smooth sensitivity %v, want in (0, %v]", ss, limit)
			}
			rel, err := ReleaseSmoothSensitivity(seeded(3), p, hs, SmoothSensitivityParams{Order: 20, Sigma: 10}, 1e-5)
			if err != nil {
				t.Fatal(err)
			}
			for name, v := range map[string]float64{"epsilon": rel.Epsilon, "released": rel.Released, "unperturbed": rel.UnsafeDataDependentEpsilon(), "noise": rel.UnsafeNoiseSD()} {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("%s is %v", name, v)
				}
			}
		})
	}
}

// TestGNMaxDataDependentSameOnAnyCores: the analysis gives the same curve
// and per-query bounds, bit for bit, however many goroutines share it.
func TestGNMaxDataDependentSameOnAnyCores(t *testing.T) {
	g := DefaultGrid()
	hs := append(benchHistograms(3000), Histogram{250, 0, 0}, Histogram{125, 125, 0}, Histogram{0, 0, 0})
	for _, b := range []QBound{QContinuous, QDiscrete} {
		want, wantQ, err := gnmaxDataDependent(g, hs, 40, b, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, workers := range []int{2, 3, 8} {
			got, gotQ, err := gnmaxDataDependent(g, hs, 40, b, workers)
			if err != nil {
				t.Fatal(err)
			}
			for k := range g.Len() {
				if math.Float64bits(got.At(k)) != math.Float64bits(want.At(k)) {
					t.Fatalf("bound %v, %d goroutines, order %v: %v, want %v as on one", b, workers, g.Order(k), got.At(k), want.At(k))
				}
			}
			for i := range wantQ {
				if math.Float64bits(gotQ[i]) != math.Float64bits(wantQ[i]) {
					t.Fatalf("bound %v, %d goroutines, query %d: log q %v, want %v", b, workers, i, gotQ[i], wantQ[i])
				}
			}
		}
	}
}
