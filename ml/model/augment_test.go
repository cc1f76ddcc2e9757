package model

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
)

func TestAugmentValidate(t *testing.T) {
	tests := []struct {
		name string
		a    Augment
		ok   bool
	}{
		{"none", Augment{}, true},
		{"all", Augment{Rotate: 15, Scale: 0.1, Shift: 2, Cutout: 4, Noise: 0.1}, true},
		{"rotate", Augment{Rotate: 181}, false},
		{"scale", Augment{Scale: 0.6}, false},
		{"shift", Augment{Shift: -1}, false},
		{"cutout", Augment{Cutout: -1}, false},
		{"noise", Augment{Noise: math.NaN()}, false},
		{"elastic", Augment{Elastic: 2, ElasticSmooth: 3}, true},
		{"elastic too far", Augment{Elastic: 17}, false},
		{"elastic smoothing", Augment{Elastic: 1, ElasticSmooth: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.a.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestAugmentApply(t *testing.T) {
	sh := data.Shape{Height: 6, Width: 6, Channels: 1}
	src := make([]float32, sh.Size())
	for i := range src {
		src[i] = 1 + float32(i)
	}
	r := rand.New(rand.NewPCG(1, 2))
	dst := make([]float32, len(src))
	tests := []struct {
		name  string
		a     Augment
		check func(t *testing.T, dst []float32)
	}{
		{"identity", Augment{}, func(t *testing.T, dst []float32) {
			if !slices.Equal(dst, src) {
				t.Fatalf("got %v, want the input", dst)
			}
		}},
		{"affine with nothing to do", Augment{Rotate: 0, Scale: 0, Shift: 1e-12}, func(t *testing.T, dst []float32) {
			for i := range dst {
				if math.Abs(float64(dst[i]-src[i])) > 1e-6 {
					t.Fatalf("pixel %d: %v, want %v", i, dst[i], src[i])
				}
			}
		}},
		{"cutout", Augment{Cutout: 2}, func(t *testing.T, dst []float32) {
			zero := 0
			for i := range dst {
				switch dst[i] {
				case 0:
					zero++
				case src[i]:
				default:
					t.Fatalf("pixel %d: %v, want %v or 0", i, dst[i], src[i])
				}
			}
			if zero < 1 || zero > 4 {
				t.Fatalf("%d pixels cut out, want 1..4", zero)
			}
		}},
		{"rotation by up to 90° keeps the mass near", Augment{Rotate: 90}, func(t *testing.T, dst []float32) {
			var a, b float64
			for i := range dst {
				a += float64(src[i])
				b += float64(dst[i])
			}
			if b < 0.5*a || b > 1.5*a {
				t.Fatalf("mass %v after rotation, %v before", b, a)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 20 {
				tt.a.Apply(dst, src, sh, r)
				tt.check(t, dst)
			}
		})
	}
}

// A pure rotation by exactly 90° (Rotate is a bound; draw until the angle
// is close) turns a horizontal bar into a vertical one.
func TestAugmentRotatesBars(t *testing.T) {
	sh := data.Shape{Height: 5, Width: 5, Channels: 1}
	bar := make([]float32, 25)
	for x := range 5 {
		bar[2*5+x] = 1
	}
	dst := make([]float32, 25)
	Augment{Rotate: 90}.affine(dst, bar, sh, rand.New(rand.NewChaCha8([32]byte{})))
	// Whatever the angle, the centre stays lit.
	if dst[12] < 0.99 {
		t.Fatalf("centre %v after a rotation about it, want 1", dst[12])
	}
}

// Warp turns, resizes and moves exactly: a horizontal bar through the
// centre turned by 90° is the vertical bar, a shift by whole pixels is
// Translate's, and a resize about the centre keeps the centre and spreads a
// bar's ends outward.
func TestWarp(t *testing.T) {
	sh := data.Shape{Height: 5, Width: 5, Channels: 1}
	bar := func(vertical bool) []float32 {
		b := make([]float32, 25)
		for i := range 5 {
			if vertical {
				b[i*5+2] = 1
			} else {
				b[2*5+i] = 1
			}
		}
		return b
	}
	near := func(a, b []float32) bool {
		for i := range a {
			if math.Abs(float64(a[i]-b[i])) > 1e-5 {
				return false
			}
		}
		return true
	}
	dst := make([]float32, 25)
	for _, deg := range []float64{90, -90} {
		Warp(dst, bar(false), sh, deg, 1, 0, 0)
		if !near(dst, bar(true)) {
			t.Errorf("a horizontal bar turned by %v° is %v, want the vertical bar", deg, dst)
		}
	}
	want := make([]float32, 25)
	Translate(want, bar(true), sh, 0, 1)
	if Warp(dst, bar(true), sh, 0, 1, 0, 1); !near(dst, want) {
		t.Errorf("moved by one column: %v, want Translate's %v", dst, want)
	}
	short := make([]float32, 25)
	for x := 1; x < 4; x++ {
		short[2*5+x] = 1
	}
	// Enlarged by 5/3 the bar reaches the edges: pixel x of the middle row
	// reads the source at 2 + (x−2)·3/5, so the ends read 0.8 of the bar's
	// last pixel, and the rows beside it 0.4 of the bar.
	Warp(dst, short, sh, 0, 5.0/3, 0, 0)
	for _, c := range []struct {
		y, x int
		want float64
	}{{2, 2, 1}, {2, 0, 0.8}, {2, 4, 0.8}, {1, 2, 0.4}, {3, 2, 0.4}, {0, 0, 0}} {
		if got := float64(dst[c.y*5+c.x]); math.Abs(got-c.want) > 1e-5 {
			t.Errorf("a 3-pixel bar enlarged by 5/3: pixel (%d,%d) is %v, want %v", c.y, c.x, got, c.want)
		}
	}
}

// halves returns n 4×4 images of two classes: the left or the right half
// brighter by one, with Gaussian noise of 0.3 on every pixel.
func halves(r *rand.Rand, n int) *data.Dataset {
	d := &data.Dataset{Shape: data.Shape{Height: 4, Width: 4, Channels: 1}, Classes: 2}
	for range n {
		c := r.IntN(2)
		for p := range 16 {
			v := r.NormFloat64() * 0.3
			if (p%4 < 2) == (c == 0) {
				v++
			}
			d.X = append(d.X, float32(v))
		}
		d.Y = append(d.Y, c)
	}
	return d
}

func TestTrainConsistencyDeterministic(t *testing.T) {
	sh := data.Shape{Height: 4, Width: 4, Channels: 1}
	r := rand.New(rand.NewPCG(3, 4))
	mk := func(n int) *data.Dataset { return halves(r, n) }
	lab, unl := mk(8), mk(200)
	spec := Spec{Kind: KindMLP, Input: sh, Classes: 2, Hidden: []int{8}}
	tc := TrainConfig{Optimizer: Adam, LearnRate: 1e-2, BatchSize: 4, Epochs: 1, MinSteps: 50, Shift: 1, Seed: 9}
	cc := Consistency{Threshold: 0.7, Weight: 1, Ratio: 3, Epochs: 2, Strong: Augment{Shift: 1, Noise: 0.1}}
	var bins [][]byte
	for range 2 {
		n, err := New(spec, 5)
		if err != nil {
			t.Fatal(err)
		}
		res, err := n.TrainConsistency(context.Background(), lab, unl, tc, cc, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Steps != 50 || res.Masked < 0 || res.Masked > 1 {
			t.Fatalf("result %+v, want 50 steps (the labelled minimum beats 2 passes of 17 over 200 unlabelled)", res)
		}
		b, _ := n.MarshalBinary()
		bins = append(bins, b)
	}
	if !slices.Equal(bins[0], bins[1]) {
		t.Fatal("two runs with the same seed differ")
	}
	bad := cc
	bad.Epochs = 0
	n, _ := New(spec, 5)
	if _, err := n.TrainConsistency(context.Background(), lab, unl, tc, bad, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("0 epochs: %v, want ErrConfig", err)
	}
}

// TestTrainConsistencyEMA: with a mean teacher the network ends with the
// averaged weights, which still classify the task it learnt, and differ
// from those of the same training without the average.
func TestTrainConsistencyEMA(t *testing.T) {
	sh := data.Shape{Height: 4, Width: 4, Channels: 1}
	r := rand.New(rand.NewPCG(7, 8))
	mk := func(n int) *data.Dataset { return halves(r, n) }
	lab, unl, test := mk(8), mk(200), mk(400)
	spec := Spec{Kind: KindMLP, Input: sh, Classes: 2, Hidden: []int{8}}
	tc := TrainConfig{Optimizer: Adam, LearnRate: 1e-2, BatchSize: 4, Epochs: 1, MinSteps: 100, Seed: 9}
	base := Consistency{Threshold: 0.7, Weight: 1, Ratio: 3, Epochs: 2, Strong: Augment{Noise: 0.1}}
	train := func(cc Consistency) *Network {
		n, err := New(spec, 5)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.TrainConsistency(context.Background(), lab, unl, tc, cc, nil); err != nil {
			t.Fatal(err)
		}
		return n
	}
	ema := base
	ema.EMA = 0.95
	plain, avg := train(base), train(ema)
	acc, err := avg.Accuracy(test)
	if err != nil {
		t.Fatal(err)
	}
	// The classes differ by a whole unit in half the pixels against noise
	// of 0.3: a network that learnt anything classifies nearly all.
	if acc < 0.95 {
		t.Fatalf("accuracy %.3f with the mean teacher, want ≥ 0.95", acc)
	}
	pb, _ := plain.MarshalBinary()
	ab, _ := avg.MarshalBinary()
	if slices.Equal(pb, ab) {
		t.Fatal("the mean teacher changed nothing")
	}
	bad := ema
	bad.EMA = 1
	if err := bad.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("EMA decay 1: %v, want ErrConfig", err)
	}
}

func TestAverage(t *testing.T) {
	spec := Spec{Kind: KindMLP, Input: data.Shape{Height: 1, Width: 2, Channels: 1}, Classes: 2, Hidden: []int{2}}
	a, _ := New(spec, 1)
	b, _ := New(spec, 2)
	for i, p := range a.ps {
		for j := range p.w {
			p.w[j], b.ps[i].w[j] = 1, 5
		}
	}
	a.average(b, 0.75)
	for _, p := range a.ps {
		for _, v := range p.w {
			if v != 2 {
				t.Fatalf("0.75·1 + 0.25·5 = %v, want 2", v)
			}
		}
	}
}

// The elastic field has the displacement length it is asked for, and is
// smooth: neighbouring pixels move together, pixels four blurs apart
// independently. Seeded; each estimate pools about 10^5 (neighbouring:
// 10^4) nearly independent values, so the tolerances are more than ten of
// their standard deviations.
func TestElasticField(t *testing.T) {
	const h, w, draws = 64, 64, 100
	r := rand.New(rand.NewPCG(3, 4))
	for _, tt := range []struct{ rms, sigma float64 }{{1, 2}, {2.5, 4}} {
		var sq, near, far, n float64
		m := int(3 * tt.sigma) // away from the borders, where the blur is cut
		for range draws {
			f := elasticField(h, w, tt.rms, tt.sigma, r)
			at := func(y, x int) float64 { return f[2*(y*w+x)] }
			for y := m; y < h-m; y++ {
				for x := m; x+int(4*tt.sigma) < w-m; x++ {
					dy, dx := f[2*(y*w+x)], f[2*(y*w+x)+1]
					sq += dy*dy + dx*dx
					near += at(y, x) * at(y, x+1)
					far += at(y, x) * at(y, x+int(4*tt.sigma))
					n++
				}
			}
		}
		if got := math.Sqrt(sq / n); math.Abs(got-tt.rms) > 0.05*tt.rms {
			t.Errorf("rms %v, σ %v: displacements of rms length %v", tt.rms, tt.sigma, got)
		}
		variance := sq / n / 2
		// A Gaussian blur of white noise: the correlation at distance d is
		// exp(−d²/4σ²).
		if c, want := near/n/variance, math.Exp(-1/(4*tt.sigma*tt.sigma)); math.Abs(c-want) > 0.05 {
			t.Errorf("rms %v, σ %v: neighbours correlated %v, want %v", tt.rms, tt.sigma, c, want)
		}
		if c := far / n / variance; math.Abs(c) > 0.05 {
			t.Errorf("rms %v, σ %v: pixels 4σ apart correlated %v, want about %v", tt.rms, tt.sigma, c, math.Exp(-4.0))
		}
	}
}

// An elastic distortion moves strokes, it does not paint: a uniform image
// stays uniform away from its border, and a stroke keeps about its mass
// (the field stretches and squeezes it locally) while its pixels change.
func TestAugmentElastic(t *testing.T) {
	sh := data.Shape{Height: 28, Width: 28, Channels: 1}
	r := rand.New(rand.NewPCG(5, 6))
	flat := make([]float32, sh.Size())
	for i := range flat {
		flat[i] = 0.5
	}
	dst := make([]float32, sh.Size())
	a := Augment{Elastic: 1.5}
	a.Apply(dst, flat, sh, r)
	for y := 6; y < 22; y++ {
		for x := 6; x < 22; x++ {
			if v := dst[y*28+x]; math.Abs(float64(v)-0.5) > 1e-5 {
				t.Fatalf("pixel (%d,%d) of a uniform image: %v, want 0.5", y, x, v)
			}
		}
	}
	stroke := make([]float32, sh.Size())
	for y := 6; y < 22; y++ {
		stroke[y*28+13], stroke[y*28+14] = 1, 1
	}
	var before float64
	for _, v := range stroke {
		before += float64(v)
	}
	changed := false
	for range 20 {
		a.Apply(dst, stroke, sh, r)
		var after float64
		for i, v := range dst {
			after += float64(v)
			changed = changed || math.Abs(float64(v-stroke[i])) > 0.1
		}
		if after < 0.5*before || after > 1.5*before {
			t.Fatalf("mass %v after an elastic distortion, %v before", after, before)
		}
	}
	if !changed {
		t.Fatal("20 elastic distortions of a stroke left every pixel within 0.1 of the original")
	}
}
