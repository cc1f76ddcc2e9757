package mechanism

import (
	"math/rand/v2"
	"testing"
)

func benchParams() map[string]Params {
	return map[string]Params{
		"nzc-laplace-paper":  {Mechanism: NZC, Teachers: 250, Noise: NoiseLaplace, Scale: 1e-10, Constant: 1e100},
		"nzc-gaussian-paper": {Mechanism: NZC, Teachers: 250, Noise: NoiseGaussian, Sigma: 1e-10, Constant: 1e100},
		"lnmax":              {Mechanism: LNMax, Teachers: 250, Scale: 20},
		"gnmax":              {Mechanism: GNMax, Teachers: 250, Sigma: 40},
		"confident-gnmax":    {Mechanism: ConfidentGNMax, Teachers: 250, Threshold: 200, Sigma1: 150, Sigma2: 40},
		"nzc-svt":            {Mechanism: NZCSVT, Teachers: 250, Scale: 1, Threshold: 20, MaxRefusals: 1 << 30},
	}
}

// Answers per second of each mechanism on a 10-class histogram.
func BenchmarkAnswer(b *testing.B) {
	h := Histogram{180, 30, 10, 10, 5, 5, 4, 3, 2, 1}
	for name, p := range benchParams() {
		b.Run(name, func(b *testing.B) {
			m, err := New(p)
			if err != nil {
				b.Fatal(err)
			}
			src := seeded(1)
			for b.Loop() {
				if _, err := m.Answer(src, h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchHistograms(n int) []Histogram {
	r := rand.New(rand.NewPCG(1, 2))
	hs := make([]Histogram, n)
	for i := range hs {
		h := make(Histogram, 10)
		top := r.IntN(10)
		agree := 125 + r.IntN(126) // between half and all of 250 teachers agree
		h[top] = agree
		for range 250 - agree {
			h[r.IntN(10)]++
		}
		hs[i] = h
	}
	return hs
}

// Analysing 10,000 queries over the default grid.
func BenchmarkAnalyze10000(b *testing.B) {
	g := DefaultGrid()
	hs := benchHistograms(10000)
	b.Run("data-independent", func(b *testing.B) {
		p := Params{Mechanism: GNMax, Teachers: 250, Sigma: 40}
		for b.Loop() {
			ch, err := p.Charge(g, len(hs), 0)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ch.Epsilon(1e-5); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gnmax-data-dependent", func(b *testing.B) {
		for b.Loop() {
			c, _, err := GNMaxDataDependent(g, hs, 40)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Epsilon(1e-5); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gnmax-smooth-sensitivity", func(b *testing.B) {
		p := Params{Mechanism: GNMax, Teachers: 250, Sigma: 40}
		for b.Loop() {
			if _, err := ReleaseSmoothSensitivity(seeded(3), p, hs, SmoothSensitivityParams{Order: 20, Sigma: 10}, 1e-5); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFilterEpsilon converts a hospital's running total as the
// ledger's cap check does for every hospital of every charge.
func BenchmarkFilterEpsilon(b *testing.B) {
	c := Gaussian(DefaultGrid(), 1, 40).Times(300)
	for b.Loop() {
		if _, err := c.FilterEpsilon(1e-5); err != nil {
			b.Fatal(err)
		}
	}
}
