package audit

import (
	"context"
	"errors"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

// The audited strategies ask what they say: unstable queries have distance
// 0, the others the distance named.
func TestStrategiesDistances(t *testing.T) {
	p := mechanism.Params{Mechanism: mechanism.NZCSVT, Teachers: 250, Scale: 2, DistanceScale: 3, Threshold: 6, MaxRefusals: 1}
	for _, teachers := range []int{250, 251} {
		if d := distanceHist(teachers, 0).Distance(teachers); d != 0 {
			t.Fatalf("%d teachers: the unstable query has distance %d", teachers, d)
		}
	}
	s := Strategies(p)
	if d, _ := s[1].Next(0, 0); distanceHist(250, d).Distance(250) != d || d != 66 {
		t.Fatalf("far query: distance %d", d)
	}
	// With 20 teachers no query is 66 away: the farthest there is.
	small := p
	small.Teachers = 20
	if d, _ := Strategies(small)[1].Next(0, 0); d != distanceHist(20, 1000).Distance(20) || d < 9 {
		t.Fatalf("far query with 20 teachers: distance %d", d)
	}
	if d, _ := s[2].Next(0, 0); d != 6 {
		t.Fatalf("query at the threshold: distance %d", d)
	}
	for _, st := range s {
		if d, _ := st.Next(100, 0); d != 0 {
			t.Fatalf("%s: after 100 answers it asks distance %d, want unstable queries", st.Name, d)
		}
	}
}

// Sessions answer an unstable query no more often than their charged δ
// says, under every audited strategy, and for K = 1 the charge is sharp: a
// session asked only unstable queries answers one with probability equal
// to its δ. Each bound holds with probability 1 − 1e-7; the seven checks
// together fail falsely with probability below 1e-6.
func TestUnstableAudit(t *testing.T) {
	const trials, confidence = 20000, 1 - 1e-7
	src := seeded(21)
	for _, p := range []mechanism.Params{
		{Mechanism: mechanism.NZCSVT, Teachers: 250, Scale: 2, DistanceScale: 3, Threshold: 6, MaxRefusals: 1},
		{Mechanism: mechanism.NZCSVT, Teachers: 250, Scale: 1.5, DistanceScale: 4, Threshold: 8, MaxRefusals: 2},
	} {
		for i, s := range Strategies(p) {
			r, err := UnstableAudit(context.Background(), src, p, s, trials, confidence, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("K %d, %s: %d of %d, [%.4f, %.4f], charged δ %.4f", p.MaxRefusals, s.Name, r.Released, r.Trials, r.Lower, r.Upper, r.DeltaAccounted)
			if !r.OK {
				t.Errorf("K %d, %s: an unstable query was answered in %d of %d sessions (at least %.4f), above the charged δ %.4f",
					p.MaxRefusals, s.Name, r.Released, r.Trials, r.Lower, r.DeltaAccounted)
			}
			if p.MaxRefusals == 1 && i == 0 && r.Upper < r.DeltaAccounted/(1+1e-6) {
				t.Errorf("K 1, unstable queries only: at most %.4f, but the charge %.4f should be attained", r.Upper, r.DeltaAccounted)
			}
		}
	}
}

// An accounting that charged half the δ is caught.
func TestUnstableAuditDetectsUndercharging(t *testing.T) {
	p := mechanism.Params{Mechanism: mechanism.NZCSVT, Teachers: 250, Scale: 2, DistanceScale: 3, Threshold: 6, MaxRefusals: 1}
	half := func(p mechanism.Params, delta float64) (float64, float64, error) {
		e, d, err := Accounted(p, delta)
		return e, d / 2, err
	}
	r, err := UnstableAudit(context.Background(), seeded(22), p, Strategies(p)[0], 20000, 1-1e-7, half)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK {
		t.Fatalf("half the δ (%.4f) passed against %d of %d sessions", r.DeltaAccounted, r.Released, r.Trials)
	}
}

func TestUnstableAuditBadConfig(t *testing.T) {
	p := mechanism.Params{Mechanism: mechanism.NZCSVT, Teachers: 250, Scale: 2, DistanceScale: 3, Threshold: 6, MaxRefusals: 1}
	s := Strategies(p)[0]
	for _, c := range []struct {
		name       string
		p          mechanism.Params
		trials     int
		confidence float64
	}{
		{"not a session", mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Sigma: 40}, 10, 0.9},
		{"no trials", p, 0, 0.9},
		{"confidence 1", p, 10, 1},
	} {
		if _, err := UnstableAudit(context.Background(), seeded(1), c.p, s, c.trials, c.confidence, nil); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v, want ErrBadConfig", c.name, err)
		}
	}
}
