package sizing

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

func TestCheck(t *testing.T) {
	unsized, err := mechanism.Preset(mechanism.ConfidentGNMax)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		p        func(teachers int) mechanism.Params
		teachers int
		refused  string // "" when it works
	}{
		{"sized for 90", func(k int) mechanism.Params { p, _ := Preset(mechanism.ConfidentGNMax, k, 10); return p }, 90, ""},
		{"sized for 150", func(k int) mechanism.Params { p, _ := Preset(mechanism.ConfidentGNMax, k, 10); return p }, 150, ""},
		{"250-teacher preset for 90", func(int) mechanism.Params { return unsized }, 90, "threshold T=200 is not below the 90 teachers"},
		{"gnmax sized for 3", func(k int) mechanism.Params { p, _ := Preset(mechanism.GNMax, k, 10); return p }, 3, "more teachers per hospital"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := Check(tc.p(tc.teachers), tc.teachers, 10, 8, 1e-5)
			if tc.refused != "" {
				if !errors.Is(err, ErrCannotWork) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err = %v, want ErrCannotWork naming %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan.Labels < 1 || plan.Epsilon > 8 || plan.Teachers != tc.teachers {
				t.Fatalf("plan %+v", plan)
			}
			t.Log(plan)
		})
	}
}

// Every federation nzc init can be asked for — 3 hospitals of 5, 10, 30,
// 60 or 250 teachers — with every registered mechanism, sized for its
// ensemble as init and the aggregator size it, or left at the 250-teacher
// preset (an operator who writes only mechanism.name), either plans labels
// that follow the teachers' clean vote or is refused saying why and what to
// change.
func TestEveryEnsembleAndMechanismPlansOrRefuses(t *testing.T) {
	const hospitals, classes, capEps, capDelta = 3, 10, 8.0, 1e-5
	// Refusals that must name their cause.
	want := map[string]string{
		"confident-gnmax/unsized/15": "threshold T=200 is not below the 15 teachers",
		"confident-gnmax/unsized/90": "threshold T=200 is not below the 90 teachers",
		"lnmax/sized/90":             "even a unanimous vote would be released as another class",
		"lnmax/sized/30":             "use gnmax sized for the ensemble (mechanism.name gnmax, mechanism.sigma 4.8)",
		"nzc/sized/750":              "the paper's constant c",
		"nzc-svt/sized/30":           "no nzc-svt session",
		"nzc-svt/unsized/15":         "threshold T=40 is above 7",
		"confident-gnmax/sized/90":   "", // nzc init --teachers 30 for three hospitals: plans
		"gnmax/sized/750":            "",
		"nzc-svt/sized/90":           "",
	}
	seen := map[string]bool{}
	for _, kind := range mechanism.Kinds() {
		for _, per := range []int{5, 10, 30, 60, 250} {
			k := hospitals * per
			for _, sized := range []bool{true, false} {
				name := fmt.Sprintf("%s/%s/%d", kind, map[bool]string{true: "sized", false: "unsized"}[sized], k)
				t.Run(name, func(t *testing.T) {
					p, err := mechanism.Preset(kind)
					if err != nil {
						t.Fatal(err)
					}
					if sized {
						if p, err = Preset(kind, k, classes); err != nil {
							// No preset for this ensemble: the check of what
							// an operator could still write must say so.
							p, _ = mechanism.Preset(kind)
						}
					}
					plan, err := Check(p, k, classes, capEps, capDelta)
					w, named := want[name]
					seen[name] = named
					if err != nil {
						if !errors.Is(err, ErrCannotWork) {
							t.Fatalf("refused without ErrCannotWork: %v", err)
						}
						if !strings.Contains(err.Error(), "use ") && !strings.Contains(err.Error(), "more teachers") && !strings.Contains(err.Error(), "set mechanism") {
							t.Errorf("the refusal does not say what to change: %v", err)
						}
						if named && (w == "" || !strings.Contains(err.Error(), w)) {
							t.Errorf("err = %v, want %q", err, w)
						}
						return
					}
					if named && w != "" {
						t.Fatalf("planned %v, want a refusal naming %q", plan, w)
					}
					if plan.Labels < 1 || plan.Epsilon > capEps || plan.UnanimousWrong > MaxUnanimousWrong {
						t.Fatalf("an unsound plan: %+v", plan)
					}
					if plan.Sessions == 0 && (plan.Lead < 1 || plan.Lead > k) {
						t.Fatalf("plan %v: lead %d for %d teachers", plan, plan.Lead, k)
					}
					checkFidelity(t, plan)
				})
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("case %s was never run", name)
		}
	}
}

// checkFidelity runs the plan's mechanism (seeded) on a vote whose top
// class leads by plan.Lead and on a unanimous vote, and checks what the
// plan says of them: the label is the clean vote with probability at least
// Agreement at the lead, and a unanimous query is answered with
// probability UnanimousAnswered. With n trials, Hoeffding's inequality
// puts each frequency within tol of its probability except with
// probability 2·exp(-2n·tol²) ≤ 1e-6; the source is seeded, so the test is
// deterministic as well.
func checkFidelity(t *testing.T, plan Plan) {
	t.Helper()
	if plan.Sessions > 0 {
		return // nzc-svt releases the exact argmax; its own tests cover it
	}
	const n = 4000
	tol := math.Sqrt(math.Log(2/1e-6) / (2 * n))
	p := plan.Mechanism
	m, err := mechanism.New(p)
	if err != nil {
		t.Fatal(err)
	}
	src := rand.NewChaCha8([32]byte{byte(plan.Teachers), 7})
	k := plan.Teachers
	// At the lead: the top class has lead votes more than the runner-up,
	// the rest on the runner-up (its strongest rival).
	rest := k - plan.Lead
	lead := make(mechanism.Histogram, plan.Classes)
	lead[0], lead[1] = plan.Lead+rest/2, rest/2
	lead[0] += rest % 2
	unanimous := make(mechanism.Histogram, plan.Classes)
	unanimous[0] = k
	for _, tc := range []struct {
		name string
		h    mechanism.Histogram
	}{{"lead", lead}, {"unanimous", unanimous}} {
		right, answered := 0, 0
		for range n {
			o, err := m.Answer(src, tc.h)
			if err != nil {
				t.Fatal(err)
			}
			if !o.Refused {
				answered++
				if o.Label == 0 {
					right++
				}
			}
		}
		if answered == 0 {
			t.Fatalf("%s: no query answered of %d", tc.name, n)
		}
		agree := float64(right) / float64(answered)
		if tc.name == "lead" && agree < Agreement-tol {
			t.Errorf("at a lead of %d of %d votes the label was the clean vote %.3f of the time; the plan says ≥ %g", plan.Lead, k, agree, Agreement)
		}
		if tc.name == "unanimous" {
			if got := float64(answered) / n; math.Abs(got-plan.UnanimousAnswered) > tol {
				t.Errorf("a unanimous query was answered %.3f of the time; the plan says %.3f", got, plan.UnanimousAnswered)
			}
			if 1-agree > plan.UnanimousWrong+tol {
				t.Errorf("a unanimous vote was released as another class %.3f of the time; the plan says %.3g", 1-agree, plan.UnanimousWrong)
			}
		}
	}
}

func TestQuorumEnsemble(t *testing.T) {
	for _, tc := range []struct {
		hospitals, quorum, size int
		listed                  map[string]int
		want                    int
	}{
		{3, 2, 30, nil, 60},
		{3, 3, 30, nil, 90},
		{3, 2, 30, map[string]int{"hospital-1": 10}, 40},
		{3, 2, 30, map[string]int{"hospital-1": 50, "hospital-2": 40}, 70},
		{2, 3, 30, nil, 60},
		{0, 2, 30, map[string]int{"hospital-1": 5, "hospital-2": 7, "hospital-3": 9}, 12},
	} {
		if got := QuorumEnsemble(tc.hospitals, tc.quorum, tc.size, tc.listed); got != tc.want {
			t.Errorf("QuorumEnsemble(%d, %d, %d, %v) = %d, want %d", tc.hospitals, tc.quorum, tc.size, tc.listed, got, tc.want)
		}
	}
}
