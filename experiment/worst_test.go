package experiment

import (
	"testing"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/selection"
)

// A data-dependent row is charged the worst case over its planned queries:
// a confident-GNMax release that refuses most of them reports the same ε
// as one that answers them all, so the ε says nothing about the votes.
func TestDataDependentRowWorstCase(t *testing.T) {
	cfg, err := Preset(PresetQuick)
	if err != nil {
		t.Fatal(err)
	}
	g := mechanism.DefaultGrid()
	const k, classes, n = 250, 10, 100
	agree, split := make(mechanism.Histogram, classes), make(mechanism.Histogram, classes)
	agree[3] = k
	split[1], split[2], split[3], split[4], split[5] = 50, 50, 50, 50, 50
	tests := []struct {
		name   string
		agg    string
		agreed int // of n; the rest split five ways
	}{
		{"confident-gnmax, teachers split on most", "confident-gnmax", 20},
		{"confident-gnmax, teachers agree on all", "confident-gnmax", n},
		{"confident-gnmax, teachers split on all", "confident-gnmax", 0},
		{"gnmax", "gnmax", 20},
		{"lnmax", "lnmax", 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := make([]mechanism.Histogram, n)
			for i := range hs {
				hs[i] = split
				if i < tt.agreed {
					hs[i] = agree
				}
			}
			row, _, err := release(cfg, tt.agg, k, classes, selection.Sequential, hs, 0)
			if err != nil {
				t.Fatal(err)
			}
			p := ParamsFor(cfg.Mechanisms[tt.agg], k, classes)
			all, err := p.Charge(g, n, 0)
			if err != nil {
				t.Fatal(err)
			}
			want, err := provenEpsilon(all, cfg.Delta)
			if err != nil {
				t.Fatal(err)
			}
			if row.Epsilon != want {
				t.Fatalf("%d of %d answered: ε %v, want the worst case over %d queries %v", row.Answered, n, row.Epsilon, n, want)
			}
		})
	}
}

// The worst case over n queries is never below the cost of any split of
// them into answers and refusals.
func TestWorstChargeBoundsEverySplit(t *testing.T) {
	g := mechanism.DefaultGrid()
	for _, agg := range []string{"confident-gnmax", "gnmax", "lnmax", "nzc", "nzc-svt"} {
		p := ParamsFor(DefaultMechanisms()[agg], 250, 10)
		const n = 50
		worst, err := worstCharge(p, g, n)
		if err != nil {
			t.Fatal(err)
		}
		we, err := provenEpsilon(worst, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		for a := 0; a <= n; a += 5 {
			ch, err := p.Charge(g, a, n-a)
			if err != nil {
				t.Fatal(err)
			}
			e, err := provenEpsilon(ch, 1e-5)
			if err != nil {
				t.Fatal(err)
			}
			if e > we {
				t.Errorf("%s: %d answered, %d refused cost ε %v above the worst case %v", agg, a, n-a, e, we)
			}
		}
	}
}
