package selection

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/data/synth"
	"github.com/nzcfed/nzc/ml/model"
)

// Confident asks first about what a student trained on a few labels is
// sure of (and right about), every predicted class in turn, and never
// again about what was asked.
func TestConfidentAsksWhatTheStudentIsSureOf(t *testing.T) {
	ctx := context.Background()
	p := pool()
	// A softmax student on the labels of the first 40 examples.
	net, err := model.New(model.Spec{Kind: model.KindSoftmax, Input: p.Shape, Classes: p.Classes}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.Train(ctx, p.Slice(0, 40), model.TrainConfig{Optimizer: model.Adam, LearnRate: 1e-2, BatchSize: 8, Epochs: 1, MinSteps: 200}, nil); err != nil {
		t.Fatal(err)
	}
	asked := make([]bool, p.Len())
	for i := range 40 {
		asked[i] = true
	}
	o, err := Confident(ctx, net, p, asked, ConfidentConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(o)); !slices.Equal(got, identity(p.Len())[40:]) {
		t.Fatal("not a permutation of the examples not yet asked")
	}
	pred, err := net.Predict(p.X)
	if err != nil {
		t.Fatal(err)
	}
	wrong := func(idx []int) int {
		w := 0
		for _, i := range idx {
			if pred[i] != p.Y[i] {
				w++
			}
		}
		return w
	}
	m := len(o) / 5
	first, last := wrong(o[:m]), wrong(o[len(o)-m:])
	t.Logf("student wrong on %d of the first %d, %d of the last %d", first, m, last, m)
	if first*4 > last || last == 0 {
		t.Fatalf("student wrong on %d of the first fifth and %d of the last: want the first at most a quarter of the last", first, last)
	}
	seen := map[int]int{}
	for _, i := range o[:80] {
		seen[pred[i]]++
	}
	for k := range p.Classes {
		if seen[k] < 12 {
			t.Fatalf("predicted class %d has %d of the first 80 queries, want ≥ 12 (%v)", k, seen[k], seen)
		}
	}
	if _, err := Confident(ctx, net, p, asked[:5], ConfidentConfig{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("5 flags for %d examples: %v, want ErrConfig", p.Len(), err)
	}
}

// softmaxStudent is a softmax student trained on the first n examples of
// p, and the flags that say those n were asked.
func softmaxStudent(t *testing.T, p *data.Dataset, n int) (*model.Network, []bool) {
	t.Helper()
	net, err := model.New(model.Spec{Kind: model.KindSoftmax, Input: p.Shape, Classes: p.Classes}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.Train(context.Background(), p.Slice(0, n), model.TrainConfig{Optimizer: model.Adam, LearnRate: 1e-2, BatchSize: 8, Epochs: 1, MinSteps: 200}, nil); err != nil {
		t.Fatal(err)
	}
	asked := make([]bool, p.Len())
	for i := range n {
		asked[i] = true
	}
	return net, asked
}

// With a floor, no example below it is asked before one at or above it;
// without one the turns are strict and doubtful examples come early.
func TestConfidentFloor(t *testing.T) {
	ctx := context.Background()
	p := pool()
	net, asked := softmaxStudent(t, p, 40)
	_, conf, err := confidence(ctx, []*model.Network{net}, p, ConfidentConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// The floor at the confidence of the 30th percentile of the rest.
	rest := slices.Sorted(slices.Values(conf[40:]))
	floor := rest[len(rest)*3/10]
	for _, tc := range []struct {
		floor     float64
		wantEarly bool // an example below the floor before one above it
	}{{0, true}, {floor, false}} {
		o, err := Confident(ctx, net, p, asked, ConfidentConfig{Floor: tc.floor})
		if err != nil {
			t.Fatal(err)
		}
		lastSure, firstDoubt := sureAndDoubt(o, conf, floor)
		if early := firstDoubt < lastSure; early != tc.wantEarly {
			t.Errorf("floor %v: first example below %.3f at %d, last at or above it at %d; want below-first %v", tc.floor, floor, firstDoubt, lastSure, tc.wantEarly)
		}
	}
	for _, bad := range []ConfidentConfig{{Floor: 1}, {Floor: -0.1}, {Spread: -1}, {Shift: 9}} {
		if _, err := Confident(ctx, net, p, asked, bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", bad, err)
		}
	}
}

// Students ranking together: an example is as sure as the least sure of
// them, so with a floor every example all of them are sure of comes before
// any one of them doubts, including examples the first student alone
// would have asked early. One student ranks as Confident does.
func TestConfidentEnsemble(t *testing.T) {
	ctx := context.Background()
	p := pool()
	a, asked := softmaxStudent(t, p, 40)
	// A second student from other labelled examples: it doubts others.
	b, err := model.New(model.Spec{Kind: model.KindSoftmax, Input: p.Shape, Classes: p.Classes}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Train(ctx, p.Slice(40, 52), model.TrainConfig{Optimizer: model.Adam, LearnRate: 1e-2, BatchSize: 4, Epochs: 1, MinSteps: 60}, nil); err != nil {
		t.Fatal(err)
	}
	probs := func(net *model.Network) [][]float32 {
		pr, err := net.ViewProbabilities(ctx, p, model.Views{})
		if err != nil {
			t.Fatal(err)
		}
		return pr
	}
	pa, pb := probs(a), probs(b)
	_, confA := model.MeanClass(pa, p.Classes)
	_, confBoth := model.MeanClass(append(pa, pb...), p.Classes)
	rest := slices.Sorted(slices.Values(confBoth[40:]))
	floor := rest[len(rest)/2]
	cc := ConfidentConfig{Floor: floor}

	one, err := Confident(ctx, a, p, asked, cc)
	if err != nil {
		t.Fatal(err)
	}
	same, err := ConfidentEnsemble(ctx, []*model.Network{a}, p, asked, cc)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(one, same) {
		t.Fatal("one student in an ensemble ranks otherwise than Confident")
	}
	both, err := ConfidentEnsemble(ctx, []*model.Network{a, b}, p, asked, cc)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(both)); !slices.Equal(got, identity(p.Len())[40:]) {
		t.Fatal("not a permutation of the examples not yet asked")
	}
	lastSure, firstDoubt := sureAndDoubt(both, confBoth, floor)
	if firstDoubt < lastSure {
		t.Fatalf("an example one student doubts at %d, before one both are sure of at %d", firstDoubt, lastSure)
	}
	// Some example the first student alone is sure of, the second doubts:
	// alone it comes among the sure, together after them.
	moved := 0
	for j, i := range one {
		if confA[i] >= floor && confBoth[i] < floor && j < lastSure {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("the second student doubts none of what the first is sure of: the test shows nothing")
	}
	t.Logf("%d examples the first student alone would ask early wait for the second", moved)

	if _, err := ConfidentEnsemble(ctx, nil, p, asked, cc); !errors.Is(err, ErrConfig) {
		t.Errorf("no students: %v, want ErrConfig", err)
	}
	three, err := model.New(model.Spec{Kind: model.KindSoftmax, Input: p.Shape, Classes: 3}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ConfidentEnsemble(ctx, []*model.Network{a, three}, p, asked, cc); !errors.Is(err, ErrConfig) {
		t.Errorf("students of 4 and 3 classes: %v, want ErrConfig", err)
	}
}

// With a spread, each class's first turns go to representatives of its
// examples, not to near-copies of the most confident.
func TestConfidentSpread(t *testing.T) {
	ctx := context.Background()
	p := pool()
	net, asked := softmaxStudent(t, p, 40)
	feat := rows(p)
	// coverage is the mean distance of the rest to its nearest asked or
	// chosen example, after choosing the first m of o.
	coverage := func(o []int, m int) float64 {
		var centres [][]float64
		for i, a := range asked {
			if a {
				centres = append(centres, feat[i])
			}
		}
		for _, i := range o[:m] {
			centres = append(centres, feat[i])
		}
		s := 0.0
		for _, i := range o[m:] {
			d := math.Inf(1)
			for _, z := range centres {
				d = min(d, sqDist(feat[i], z))
			}
			s += math.Sqrt(d)
		}
		return s / float64(len(o)-m)
	}
	plain, err := Confident(ctx, net, p, asked, ConfidentConfig{})
	if err != nil {
		t.Fatal(err)
	}
	spread, err := Confident(ctx, net, p, asked, ConfidentConfig{Spread: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(spread)); !slices.Equal(got, identity(p.Len())[40:]) {
		t.Fatal("not a permutation of the examples not yet asked")
	}
	cp, cs := coverage(plain, 40), coverage(spread, 40)
	t.Logf("mean distance to the nearest asked after 40 more: most confident first %.3f, spread %.3f", cp, cs)
	if !(cs < 0.9*cp) {
		t.Fatalf("spread leaves the rest at mean distance %.3f, most confident first %.3f: want at least 10 %% closer", cs, cp)
	}
	pred, err := net.Predict(p.X)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for _, i := range spread[:40] {
		seen[pred[i]]++
	}
	for k := range p.Classes {
		if seen[k] != 10 {
			t.Fatalf("predicted classes of the first 40 with spread: %v, want 10 each", seen)
		}
	}
}

// Representatives come first, one per cluster, in their earlier order;
// the others keep theirs.
func TestRepresentatives(t *testing.T) {
	// Two tight groups on a line, around 0 and around 10.
	feat := [][]float64{{-9}, {0.2}, {10.1}, {-0.1}, {9.8}, {10}, {0}}
	rest := []int{1, 2, 3, 4, 5, 6}
	cand := []int{0, 1, 2, 3, 4, 5} // indices into rest
	if err := representatives(context.Background(), feat, rest, cand, 2, 1); err != nil {
		t.Fatal(err)
	}
	got := make([]float64, len(cand))
	for j, c := range cand {
		got[j] = feat[rest[c]][0]
	}
	// The centres' nearest members, 10 and 0, in their order, then the rest.
	if want := []float64{10, 0, 0.2, 10.1, -0.1, 9.8}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// Turned and resized views lower the confidence of the examples that
// change under them: a student of four strokes (a turn by 90° makes a
// horizontal bar a vertical one) is less sure of many images when they are
// also seen turned by 40°, and never surer of any.
func TestConfidentTurnedAndResizedViews(t *testing.T) {
	ctx := context.Background()
	p := synth.Shapes{Size: 10, Stroke: 6, Noise: 0.1}.Make(5, 400)
	net, err := model.New(model.Spec{Kind: model.KindSoftmax, Input: p.Shape, Classes: p.Classes}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.Train(ctx, p.Slice(0, 200), model.TrainConfig{Optimizer: model.Adam, LearnRate: 1e-2, BatchSize: 16, Epochs: 5}, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cc    ConfidentConfig
		views int
	}{{ConfidentConfig{}, 1}, {ConfidentConfig{Shift: 1}, 5}, {ConfidentConfig{Rotate: 40}, 3}, {ConfidentConfig{Shift: 1, Rotate: 40, Scale: 0.2}, 9}} {
		if n := c.cc.views().Count(p.Shape); n != c.views {
			t.Errorf("%+v: %d views, want %d", c.cc, n, c.views)
		}
	}
	if n := (ConfidentConfig{Shift: 1, Rotate: 40}).views().Count(data.Shape{Height: 1, Width: 6, Channels: 1}); n != 1 {
		t.Errorf("%d views of a row of features, want the example itself only", n)
	}
	class0, conf0, err := confidence(ctx, []*model.Network{net}, p, ConfidentConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cc := range []ConfidentConfig{{Rotate: 40}, {Scale: 0.3}} {
		class1, conf1, err := confidence(ctx, []*model.Network{net}, p, cc)
		if err != nil {
			t.Fatal(err)
		}
		lower := 0
		for i := range conf0 {
			if class0[i] != class1[i] {
				continue
			}
			if conf1[i] > conf0[i]+1e-9 {
				t.Fatalf("%+v: example %d more confident (%v) with more views than alone (%v)", cc, i, conf1[i], conf0[i])
			}
			if conf1[i] < conf0[i]-0.05 {
				lower++
			}
		}
		t.Logf("%+v: %d of %d examples at least 0.05 less confident", cc, lower, p.Len())
		if lower < p.Len()/10 {
			t.Errorf("%+v: only %d of %d examples less confident with the turned or resized views, want a tenth", cc, lower, p.Len())
		}
	}
}

// sureAndDoubt returns the place in order of the last example whose
// confidence is at least floor, and of the first below it (len(order)
// when none is).
func sureAndDoubt(order []int, conf []float64, floor float64) (lastSure, firstDoubt int) {
	lastSure, firstDoubt = -1, len(order)
	for j, i := range order {
		if conf[i] >= floor {
			lastSure = j
		} else {
			firstDoubt = min(firstDoubt, j)
		}
	}
	return lastSure, firstDoubt
}
