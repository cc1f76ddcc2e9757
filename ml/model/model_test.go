package model

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/data/synth"
)

func randomBatch(r *rand.Rand, spec Spec, n int) ([]float32, []int) {
	x := make([]float32, n*spec.Input.Size())
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]int, n)
	for i := range y {
		y[i] = r.IntN(spec.Classes)
	}
	return x, y
}

// TestGradients compares backpropagated gradients with central finite
// differences of the loss on tiny models of every kind.
func TestGradients(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
	}{
		{"softmax", Spec{Kind: KindSoftmax, Input: data.Shape{Height: 1, Width: 5, Channels: 1}, Classes: 3}},
		{"mlp", Spec{Kind: KindMLP, Input: data.Shape{Height: 1, Width: 4, Channels: 1}, Classes: 3, Hidden: []int{6, 5}}},
		{"cnn", Spec{Kind: KindCNN, Input: data.Shape{Height: 6, Width: 6, Channels: 2}, Classes: 3, Conv: []Conv{{Filters: 3, Kernel: 3}}, Hidden: []int{4}}},
		{"cnn2", Spec{Kind: KindCNN, Input: data.Shape{Height: 8, Width: 7, Channels: 1}, Classes: 4, Conv: []Conv{{Filters: 2, Kernel: 3}, {Filters: 3, Kernel: 5}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 7))
			n, err := New(tt.spec, 3)
			if err != nil {
				t.Fatal(err)
			}
			// Non-zero biases so that every path is exercised.
			for i, p := range n.ps {
				if i%2 == 1 {
					for j := range p.w {
						p.w[j] = float32(r.NormFloat64() * 0.1)
					}
				}
			}
			x, y := randomBatch(r, tt.spec, 5)
			n.lossGrad(x, y)
			const eps = 1e-3
			for pi, p := range n.ps {
				ana := slices.Clone(p.g)
				var num, diff, norm float64
				for j := range p.w {
					w := p.w[j]
					p.w[j] = w + eps
					lp, _ := n.Loss(x, y)
					p.w[j] = w - eps
					lm, _ := n.Loss(x, y)
					p.w[j] = w
					num = (lp - lm) / (2 * eps)
					diff += (num - float64(ana[j])) * (num - float64(ana[j]))
					norm += num*num + float64(ana[j])*float64(ana[j])
				}
				if rel := math.Sqrt(diff / norm); norm > 0 && rel > 1e-2 {
					t.Errorf("tensor %d: relative gradient error %.3g", pi, rel)
				}
			}
		})
	}
}

// blobs makes a 4-class problem of Gaussian clusters in d dimensions.
func blobs(seed uint64, n, d int) *data.Dataset {
	return synth.Blobs{Classes: 4, Dim: d, Spread: 2, CentreSeed: [2]uint64{99, 1}}.Make(seed, n)
}

// bars makes 10×10 images holding one horizontal (class 0) or vertical
// (class 1) bar at a random place, plus noise: a problem for convolutions.
func bars(seed uint64, n int) *data.Dataset {
	r := rand.New(rand.NewPCG(seed, 2))
	ds := &data.Dataset{Shape: data.Shape{Height: 10, Width: 10, Channels: 1}, Classes: 2}
	for range n {
		img := make([]float32, 100)
		for i := range img {
			img[i] = float32(r.NormFloat64() * 0.3)
		}
		k := r.IntN(2)
		pos, start := r.IntN(10), r.IntN(5)
		for s := start; s < start+5; s++ {
			if k == 0 {
				img[pos*10+s] += 1
			} else {
				img[s*10+pos] += 1
			}
		}
		ds.X = append(ds.X, img...)
		ds.Y = append(ds.Y, k)
	}
	return ds
}

func TestLearnsSynthetic(t *testing.T) {
	tests := []struct {
		name  string
		spec  Spec
		cfg   TrainConfig
		train *data.Dataset
		test  *data.Dataset
	}{
		{"softmax/sgd", Spec{Kind: KindSoftmax, Input: data.Shape{Height: 1, Width: 8, Channels: 1}, Classes: 4},
			TrainConfig{Optimizer: SGD, LearnRate: 0.1, Momentum: 0.9, BatchSize: 32, Epochs: 10, Seed: 1}, blobs(1, 800, 8), blobs(2, 400, 8)},
		{"mlp/adam", Spec{Kind: KindMLP, Input: data.Shape{Height: 1, Width: 8, Channels: 1}, Classes: 4, Hidden: []int{16}},
			TrainConfig{Optimizer: Adam, LearnRate: 0.01, BatchSize: 32, Epochs: 10, Cosine: true, Seed: 1}, blobs(1, 800, 8), blobs(2, 400, 8)},
		{"cnn/adam", Spec{Kind: KindCNN, Input: data.Shape{Height: 10, Width: 10, Channels: 1}, Classes: 2, Conv: []Conv{{Filters: 4, Kernel: 5}}, Hidden: []int{16}},
			TrainConfig{Optimizer: Adam, LearnRate: 0.01, BatchSize: 32, Epochs: 10, Cosine: true, Seed: 1}, bars(1, 600), bars(2, 300)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := New(tt.spec, 5)
			if err != nil {
				t.Fatal(err)
			}
			before, _ := n.Accuracy(tt.test)
			if _, err := n.Train(context.Background(), tt.train, tt.cfg, nil); err != nil {
				t.Fatal(err)
			}
			acc, err := n.Accuracy(tt.test)
			if err != nil {
				t.Fatal(err)
			}
			if acc < 0.95 {
				t.Fatalf("held-out accuracy %.3f after training (%.3f before), want ≥ 0.95", acc, before)
			}
		})
	}
}

// TestTrainAugment checks that Augment distorts what training sees: bars
// turned by up to 90° lose their orientation, so the label, and a network
// trained on them must fail; moved by 2 pixels they keep it. If the
// distortion were not applied, both would learn.
func TestTrainAugment(t *testing.T) {
	spec := Spec{Kind: KindCNN, Input: data.Shape{Height: 10, Width: 10, Channels: 1}, Classes: 2, Conv: []Conv{{Filters: 4, Kernel: 5}}, Hidden: []int{16}}
	tests := []struct {
		name     string
		aug      Augment
		min, max float64
	}{
		{"moved", Augment{Shift: 2}, 0.95, 1},
		{"turned 90°", Augment{Rotate: 90}, 0, 0.8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := New(spec, 5)
			if err != nil {
				t.Fatal(err)
			}
			cfg := TrainConfig{Optimizer: Adam, LearnRate: 0.01, BatchSize: 32, Epochs: 10, Cosine: true, Seed: 1, Augment: tt.aug}
			if _, err := n.Train(context.Background(), bars(1, 600), cfg, nil); err != nil {
				t.Fatal(err)
			}
			acc, err := n.Accuracy(bars(2, 300))
			if err != nil {
				t.Fatal(err)
			}
			if acc < tt.min || acc > tt.max {
				t.Fatalf("held-out accuracy %.3f, want %.2f to %.2f", acc, tt.min, tt.max)
			}
		})
	}
}

// TestTrainConfigJSONWithoutAugment pins the encoding of a configuration
// without Augment: it keys the teacher cache, so adding the field must not
// change the key of a teacher trained before it.
func TestTrainConfigJSONWithoutAugment(t *testing.T) {
	b, err := json.Marshal(TrainConfig{Optimizer: Adam, LearnRate: 0.003, BatchSize: 32, Epochs: 3, MinSteps: 300, Cosine: true, Shift: 2})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"optimizer":"adam","learn_rate":0.003,"momentum":0,"weight_decay":0,"batch_size":32,"epochs":3,"min_steps":300,"cosine":true,"shift":2,"seed":0}`
	if string(b) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", b, want)
	}
}

func trainSmall(t *testing.T, seed uint64) []byte {
	t.Helper()
	spec := Spec{Kind: KindCNN, Input: data.Shape{Height: 10, Width: 10, Channels: 1}, Classes: 2, Conv: []Conv{{Filters: 3, Kernel: 3}}, Hidden: []int{8}}
	n, err := New(spec, seed)
	if err != nil {
		t.Fatal(err)
	}
	cfg := TrainConfig{Optimizer: Adam, LearnRate: 0.01, BatchSize: 16, Epochs: 2, Seed: seed}
	if _, err := n.Train(context.Background(), bars(3, 200), cfg, nil); err != nil {
		t.Fatal(err)
	}
	b, err := n.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDeterministic(t *testing.T) {
	a, b, c := trainSmall(t, 1), trainSmall(t, 1), trainSmall(t, 2)
	if !bytes.Equal(a, b) {
		t.Fatal("same seed produced different weights")
	}
	if bytes.Equal(a, c) {
		t.Fatal("different seeds produced identical weights")
	}
}

func TestSaveLoad(t *testing.T) {
	spec := Spec{Kind: KindCNN, Input: data.Shape{Height: 10, Width: 10, Channels: 1}, Classes: 2, Conv: []Conv{{Filters: 3, Kernel: 3}}, Hidden: []int{8}}
	n, _ := New(spec, 4)
	path := filepath.Join(t.TempDir(), "m.nzcm")
	if err := n.Save(path); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ds := bars(5, 50)
	l1, _ := n.Logits(ds.X, nil)
	l2, _ := m.Logits(ds.X, nil)
	if !slices.Equal(l1, l2) {
		t.Fatal("loaded model computes different logits")
	}
	good, _ := n.MarshalBinary()
	withCRC := func(b []byte) []byte {
		b = slices.Clone(b[:len(b)-4])
		return binary.LittleEndian.AppendUint32(b, crc32IEEE(b))
	}
	badVersion := slices.Clone(good)
	binary.LittleEndian.PutUint16(badVersion[8:], 99)
	flipped := slices.Clone(good)
	flipped[len(flipped)/2] ^= 1
	wrongKind := slices.Clone(good)
	copy(wrongKind[11:14], "mlp")
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrFormat},
		{"not a model", []byte("hello world, not a model"), ErrFormat},
		{"version", badVersion, ErrVersion},
		{"checksum", flipped, ErrFormat},
		{"truncated", withCRC(good[:len(good)-40]), ErrFormat},
		{"kind mismatch", withCRC(wrongKind), ErrFormat},
	}
	for _, tt := range tests {
		if _, err := Unmarshal(tt.in); !errors.Is(err, tt.want) {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	in := data.Shape{Height: 4, Width: 4, Channels: 1}
	bad := []Spec{
		{Kind: "rnn", Input: in, Classes: 2},
		{Kind: KindMLP, Input: in, Classes: 1},
		{Kind: KindCNN, Input: in, Classes: 2},
		{Kind: KindCNN, Input: in, Classes: 2, Conv: []Conv{{Filters: 2, Kernel: 2}}},
		{Kind: KindCNN, Input: in, Classes: 2, Conv: []Conv{{2, 3}, {2, 3}, {2, 3}}},
		{Kind: KindMLP, Input: in, Classes: 2, Hidden: []int{0}},
		{Kind: KindMLP, Input: in, Classes: 2, Hidden: []int{1 << 16, 1 << 16}},
		{Kind: KindSoftmax, Input: in, Classes: 2, Hidden: []int{3}},
	}
	for _, s := range bad {
		if _, err := New(s, 1); !errors.Is(err, ErrSpec) {
			t.Errorf("New(%+v): %v, want ErrSpec", s, err)
		}
	}
	cfgs := []TrainConfig{
		{Optimizer: "rmsprop", LearnRate: 1, BatchSize: 1, Epochs: 1},
		{Optimizer: SGD, LearnRate: 0, BatchSize: 1, Epochs: 1},
		{Optimizer: SGD, LearnRate: 1, BatchSize: 0, Epochs: 1},
		{Optimizer: SGD, LearnRate: 1, BatchSize: 1, Epochs: 0},
		{Optimizer: SGD, LearnRate: 1, Momentum: 1, BatchSize: 1, Epochs: 1},
		{Optimizer: SGD, LearnRate: 1, BatchSize: 1, Epochs: 1, Shift: 2, Augment: Augment{Rotate: 10}},
		{Optimizer: SGD, LearnRate: 1, BatchSize: 1, Epochs: 1, Augment: Augment{Rotate: 200}},
	}
	for _, c := range cfgs {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, s := range []Spec{
		{Kind: KindSoftmax, Input: data.Shape{Height: 1, Width: 3, Channels: 1}, Classes: 2},
		{Kind: KindCNN, Input: data.Shape{Height: 4, Width: 4, Channels: 1}, Classes: 2, Conv: []Conv{{Filters: 1, Kernel: 3}}},
	} {
		n, _ := New(s, 1)
		b, _ := n.MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := Unmarshal(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrVersion) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, err := n.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Unmarshal(again); err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
	})
}

func TestTranslate(t *testing.T) {
	sh := data.Shape{Height: 3, Width: 3, Channels: 1}
	src := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	dst := make([]float32, 9)
	tests := []struct {
		dy, dx int
		want   []float32
	}{
		{0, 0, src},
		{1, 0, []float32{0, 0, 0, 1, 2, 3, 4, 5, 6}},
		{0, -1, []float32{2, 3, 0, 5, 6, 0, 8, 9, 0}},
		{-1, 1, []float32{0, 4, 5, 0, 7, 8, 0, 0, 0}},
		{3, 0, make([]float32, 9)},
	}
	for _, tt := range tests {
		translate(dst, src, sh, tt.dy, tt.dx)
		if !slices.Equal(dst, tt.want) {
			t.Errorf("translate(%d,%d) = %v, want %v", tt.dy, tt.dx, dst, tt.want)
		}
	}
}

func TestGEMMRate(t *testing.T) {
	// A tiny product, timed for a moment: the rate must be a positive, finite number.
	if r := GEMMRate(32, time.Millisecond); !(r > 0) || math.IsInf(r, 0) {
		t.Fatalf("GEMMRate = %v", r)
	}
}

// A clone computes what its original computes and shares none of its
// weights: training the original afterwards leaves the clone as it was.
func TestClone(t *testing.T) {
	for _, spec := range []Spec{
		{Kind: KindMLP, Input: data.Shape{Height: 1, Width: 4, Channels: 1}, Classes: 3, Hidden: []int{6, 5}},
		{Kind: KindCNN, Input: data.Shape{Height: 6, Width: 6, Channels: 2}, Classes: 3, Conv: []Conv{{Filters: 3, Kernel: 3}}, Hidden: []int{4}},
	} {
		n, err := New(spec, 7)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, 2*spec.Input.Size())
		for i := range x {
			x[i] = float32(i%7) / 7
		}
		want, err := n.Logits(x, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := n.Clone()
		got, err := c.Logits(x, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: clone's logits %v, want %v", spec.Kind, got, want)
		}
		for _, p := range n.ps {
			for i := range p.w {
				p.w[i] += 1
			}
		}
		if again, _ := c.Logits(x, nil); !slices.Equal(again, want) {
			t.Fatalf("%s: changing the original changed the clone's logits to %v", spec.Kind, again)
		}
	}
}

// A reader computes what its network computes from the same weights: it
// follows a change to them and copies none.
func TestReader(t *testing.T) {
	spec := Spec{Kind: KindCNN, Input: data.Shape{Height: 6, Width: 6, Channels: 2}, Classes: 3, Conv: []Conv{{Filters: 3, Kernel: 3}}, Hidden: []int{4}}
	n, err := New(spec, 7)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 3*spec.Input.Size())
	for i := range x {
		x[i] = float32(i%5) / 5
	}
	r := n.Reader()
	for round := range 2 {
		want, _ := n.Logits(x, nil)
		got, err := r.Logits(x, nil)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("round %d: reader's logits %v (%v), want %v", round, got, err, want)
		}
		for _, p := range n.ps {
			for i := range p.w {
				p.w[i] *= 1.5
			}
		}
	}
}
