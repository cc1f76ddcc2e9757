package faults

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/federation/launch"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/data/synth"
	"github.com/nzcfed/nzc/party/student"
	"github.com/nzcfed/nzc/party/teacher"
)

// The federation `nzc init --teachers 30` makes: 3 hospitals of 30
// teachers on 10 classes, asked sizingQueries queries in batches of
// sizingBatch, within what init's plan says a cap pays for (198 labels).
const (
	sizingTeachers = 30
	sizingClasses  = 10
	sizingQueries  = 160
	sizingBatch    = 16
	// falseFailure is the probability with which each statistical check
	// below may fail on a correct federation.
	falseFailure = 1e-6
	// slack is how far, in accuracy, the released labels may fall short of
	// the clean vote over every query asked (see below).
	slack = 0.05
)

// TestInitSizedFederation runs the federation `nzc init --teachers 30`
// writes, with the mechanism, caps and quorum exactly as written (confident
// GNMax sized for 90 teachers), and holds its released labels to the clean
// vote of the same teachers, which the test computes itself from the
// hospitals' trained models (a test is not a release). A mechanism the
// ensemble cannot follow is refused at the aggregator's start, saying what
// to set.
//
// For the run, with n_i the clean histogram of answered query i (of the
// hospitals its charge names), c_i its argmax and σ2 the answer noise:
//   - the label differs from c_i with probability at most p_i, the sum over
//     the other classes j of P(Z - Z' ≥ n_i[c_i] - n_i[j]) for two discrete
//     Gaussians of σ2, computed exactly (1 for a tied vote); given the votes
//     and which queries were answered (the test noise is drawn apart) the
//     disagreements D are independent, so by Bernstein's inequality
//     D ≤ μ + a, μ = Σ p_i, fails with probability at most falseFailure;
//   - query i is answered with probability q_i = P(n_i[c_i] + Z1 ≥ T),
//     computed exactly; the answers are independent, so the answered count
//     A ≥ Σq - sqrt(2Σq·ln(1/falseFailure)) fails with probability at most
//     falseFailure (Chernoff);
//   - a released label is right with probability at least
//     Σ q_i (right_i - p_i) / Σ q_i, right_i = 1 when c_i is the true
//     class: a figure of the votes and the mechanism alone, with no
//     randomness, which must be at least the clean vote's accuracy over
//     every query asked, less slack. The mechanism init wrote lets labels
//     follow this ensemble's clean vote; the 250-teacher preset (T = 200,
//     σ2 = 40 on 90 votes, the old default) releases labels near chance.
func TestInitSizedFederation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a federation of processes")
	}
	f := newFedWith(t, buildBinaries(t), fedOptions{
		teachers: sizingTeachers, classes: sizingClasses, train: 90 * 60, queries: sizingQueries, asInit: true,
		blobs: synth.Blobs{Classes: sizingClasses, Dim: 10, Spread: 1.5, CentreSeed: [2]uint64{5, 9}},
	})
	written := f.aggCfg.MechanismParams()
	if written.Mechanism != mechanism.ConfidentGNMax || written.Threshold != 72 {
		t.Fatalf("nzc init wrote %s (%v), want confident-gnmax sized for 90 teachers", written.Mechanism, written)
	}
	f.stuCfg.BatchSize = sizingBatch
	writeYAML(t, f.stuPath, f.stuCfg)

	t.Run("refused", func(t *testing.T) {
		unsized, err := mechanism.Preset(mechanism.ConfidentGNMax)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			mech mechanism.Params
			want []string
		}{
			{"250-teacher preset", unsized, []string{"threshold T=200 is not below the 90 teachers", "nzc init sizes them: T=72"}},
			{"lnmax b=20", mechanism.Params{Mechanism: mechanism.LNMax, Scale: 20}, []string{"even a unanimous vote", "mechanism.sigma 14.4"}},
			{"nzc-svt above half the ensemble", mechanism.Params{Mechanism: mechanism.NZCSVT, Threshold: 46, MaxRefusals: 1, Scale: 2.857, DistanceScale: 3.077},
				[]string{"threshold T=46 is above 45", "the preset session planned for 90 teachers is T=40"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := f.aggCfg
				c.Mechanism = tc.mech
				path := filepath.Join(t.TempDir(), "aggregator.yaml")
				writeYAML(t, path, c)
				out, err := f.tryOneShot("aggregator-"+strings.ReplaceAll(tc.name, " ", "-"), "nzc-aggregator", nil, "run", "--config", path)
				if err == nil {
					t.Fatalf("the aggregator ran %v for 90 teachers:\n%s", tc.mech, out)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("the refusal does not say %q:\n%v", w, err)
					}
				}
			})
		}
	})

	t.Run("labels", func(t *testing.T) {
		f.startAll()
		run := f.startStudent(0, sizingQueries, "")
		res := run.resultOf(t, 3*time.Minute)
		if res.Stopped != "" {
			t.Fatalf("labelling stopped: %s", res.Stopped)
		}
		led := f.verifiedLedger(t, f.leader(t))

		queries, err := data.LoadCSV(f.dataQuery)
		if err != nil {
			t.Fatal(err)
		}
		votes := f.hospitalVotes(t, queries)
		test, answer := newDiscreteGaussian(written.Sigma1), newDiscreteGaussian(written.Sigma2)
		var (
			asked, answered, disagree, rightReleased, rightClean, rightCleanAsked int
			mu, wantAnswered, wantRight                                           float64
		)
		for _, b := range res.Batches {
			cs := led.charges[b.BatchID]
			if len(cs) != 1 {
				t.Fatalf("batch %s…: %d charges", b.BatchID[:12], len(cs))
			}
			for j, label := range b.Labels {
				q := b.From + j
				if res.Order != nil {
					q = res.Order[b.From+j]
				}
				h := make([]int, sizingClasses)
				for _, id := range cs[0].Hospitals {
					for c, v := range votes[id][q] {
						h[c] += v
					}
				}
				top := mechanism.Histogram(h).Top()
				right := 0.0
				if top == queries.Y[q] {
					right = 1
					rightCleanAsked++
				}
				asked++
				// The test answers when h[top] + Z1 ≥ T; an answer is the
				// clean vote but with probability at most p.
				qa := test.atLeast(int(math.Ceil(written.Threshold)) - h[top])
				p := answer.disagree(h, top)
				wantAnswered += qa
				wantRight += qa * (right - p)
				if label < 0 {
					continue
				}
				answered++
				mu += p
				if int(label) != top {
					disagree++
				}
				if int(label) == queries.Y[q] {
					rightReleased++
				}
				rightClean += int(right)
			}
		}
		L := math.Log(1 / falseFailure)
		a := L/3 + math.Sqrt(L*L/9+2*L*mu)
		cleanAsked := float64(rightCleanAsked) / float64(asked)
		expected := wantRight / wantAnswered
		t.Logf("%d queries asked, %d answered (expected %.1f); released labels right %d/%d (%.1f%%), expected at least %.1f%%; the clean vote right on the same queries %d/%d (%.1f%%), on every query asked %d/%d (%.1f%%); %d labels disagree with the clean vote, expected at most μ = %.2f, allowed μ + a = %.2f",
			asked, answered, wantAnswered, rightReleased, answered, pct(rightReleased, answered), 100*expected, rightClean, answered, pct(rightClean, answered), rightCleanAsked, asked, 100*cleanAsked, disagree, mu, mu+a)
		if asked != sizingQueries {
			t.Fatalf("%d queries asked, want %d", asked, sizingQueries)
		}
		if floor := wantAnswered - math.Sqrt(2*wantAnswered*L); float64(answered) < floor || answered == 0 {
			t.Errorf("%d queries answered, expected %.1f: at least %.1f must be", answered, wantAnswered, floor)
		}
		if expected < cleanAsked-slack {
			t.Errorf("a released label is right with probability at least %.3f, below the clean vote's %.3f over every query asked less %g: the mechanism's noise drowns this ensemble", expected, cleanAsked, slack)
		}
		if float64(disagree) > mu+a {
			t.Errorf("%d released labels disagree with the clean vote, more than μ + a = %.2f", disagree, mu+a)
		}
		// The summary says what the mechanism allows, and does not blame
		// a sized threshold for the refusals.
		log := run.p.LogText()
		if !strings.Contains(log, `"plan"`) || !strings.Contains(log, `"unanimous_answered"`) {
			t.Errorf("the student's summary does not give the mechanism's plan:\n%s", log)
		}
		if strings.Contains(log, "larger ensemble") {
			t.Errorf("the student's summary blames the threshold of a mechanism sized for its ensemble:\n%s", log)
		}
	})
}

// discreteGaussian is the discrete Gaussian of σ: mass ∝ exp(-x²/2σ²) on
// the integers, held for |x| ≤ 20σ + 2 (the mass beyond, below 1e-80, is
// added to every tail, rounding it up).
type discreteGaussian struct {
	k     int
	pmf   []float64 // pmf[i] = P(Z = i-k)
	below []float64 // below[i] = P(Z ≤ i-k)
}

func newDiscreteGaussian(sigma float64) *discreteGaussian {
	k := int(math.Ceil(20*sigma)) + 2
	d := &discreteGaussian{k: k, pmf: make([]float64, 2*k+1), below: make([]float64, 2*k+1)}
	total := 0.0
	for i := range d.pmf {
		x := float64(i - k)
		d.pmf[i] = math.Exp(-x * x / (2 * sigma * sigma))
		total += d.pmf[i]
	}
	run := 0.0
	for i := range d.pmf {
		d.pmf[i] /= total
		run += d.pmf[i]
		d.below[i] = run
	}
	return d
}

// atLeast is P(Z ≥ m).
func (d *discreteGaussian) atLeast(m int) float64 {
	switch i := m - 1 + d.k; {
	case i < 0:
		return 1
	case i >= len(d.below):
		return 1e-80
	default:
		return min(1, 1-d.below[i]+1e-80)
	}
}

// gapAtLeast is P(Z - Z' ≥ m) for two independent draws.
func (d *discreteGaussian) gapAtLeast(m int) float64 {
	p := 0.0
	for i, w := range d.pmf {
		// Z = i-k and Z' ≤ i-k-m.
		if j := i - m; j >= 0 {
			p += w * d.below[min(j, len(d.below)-1)]
		}
	}
	return min(1, p+1e-80)
}

// disagree bounds the probability that GNMax with this noise releases
// another class than top for the histogram h: the sum over the other
// classes of their chance to draw at least the gap more noise than top (1
// for a tie at the top).
func (d *discreteGaussian) disagree(h []int, top int) float64 {
	p := 0.0
	for c, v := range h {
		if c == top {
			continue
		}
		if h[top] <= v {
			return 1
		}
		p += d.gapAtLeast(h[top] - v)
	}
	return min(1, p)
}

func pct(n, d int) float64 {
	if d == 0 {
		return 0
	}
	return 100 * float64(n) / float64(d)
}

// hospitalVotes loads each hospital's trained teachers, as nzc-teacher
// train wrote them, and returns their vote histograms on every query, by
// hospital id.
func (f *fed) hospitalVotes(t *testing.T, queries *data.Dataset) map[string][][]int {
	t.Helper()
	out := map[string][][]int{}
	for _, h := range f.hospitals {
		dir := h.cfg.Models
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(filepath.Dir(h.cfgPath), dir)
		}
		e, err := teacher.LoadEnsemble(dir)
		if err != nil {
			t.Fatal(err)
		}
		if e.Teachers() != sizingTeachers {
			t.Fatalf("%s trained %d teachers, want %d", h.id, e.Teachers(), sizingTeachers)
		}
		v, err := e.Votes(context.Background(), queries.X)
		if err != nil {
			t.Fatal(err)
		}
		out[h.id] = v
	}
	return out
}

// resultOf waits for the run and returns what the student received, with
// any batch size.
func (r *studentRun) resultOf(t *testing.T, within time.Duration) *student.Result {
	t.Helper()
	r.p.wait(t, within)
	if code := r.p.ExitCode(); code != 0 {
		t.Fatalf("student run exited with %d:\n%s", code, launch.LastLines(r.p.LogText(), 30))
	}
	b, err := os.ReadFile(r.out)
	if err != nil {
		t.Fatal(err)
	}
	var res student.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	return &res
}
