package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/nzcfed/nzc/ml/data"
)

// Optimizers.
const (
	SGD  = "sgd"  // SGD with (optional) momentum
	Adam = "adam" // Adam (Kingma & Ba 2015)
)

// TrainConfig is how a network is trained.
type TrainConfig struct {
	Optimizer   string  `json:"optimizer"`    // sgd or adam
	LearnRate   float64 `json:"learn_rate"`   // initial step size
	Momentum    float64 `json:"momentum"`     // sgd only
	WeightDecay float64 `json:"weight_decay"` // L2 penalty on weights (not biases)
	BatchSize   int     `json:"batch_size"`
	Epochs      int     `json:"epochs"`
	// MinSteps raises the number of epochs so that training takes at least
	// this many minibatch steps (small shards need more passes).
	MinSteps int `json:"min_steps,omitempty"`
	// Cosine decays the step size to zero along a half cosine.
	Cosine bool `json:"cosine"`
	// Shift, for image data, translates each training example by a random
	// offset of up to Shift pixels in each direction (zero fill) every time
	// it is used: cheap augmentation for small shards.
	Shift int `json:"shift,omitempty"`
	// Augment, when set, distorts each image training example at random
	// every time it is used (rotation, scaling, translation, cutout), in
	// place of Shift: a small shard then covers more of the ways a class
	// is written.
	Augment Augment `json:"augment,omitzero"`
	Seed    uint64  `json:"seed"` // shuffling order
}

// ErrConfig reports training settings that cannot work.
var ErrConfig = errors.New("invalid training configuration")

// Validate checks the settings.
func (c TrainConfig) Validate() error {
	switch {
	case c.Optimizer != SGD && c.Optimizer != Adam:
		return fmt.Errorf("%w: optimizer %q, want sgd or adam", ErrConfig, c.Optimizer)
	case !(c.LearnRate > 0) || math.IsInf(c.LearnRate, 0):
		return fmt.Errorf("%w: learning rate %v must be positive", ErrConfig, c.LearnRate)
	case c.Momentum < 0 || c.Momentum >= 1:
		return fmt.Errorf("%w: momentum %v must be in [0,1)", ErrConfig, c.Momentum)
	case c.WeightDecay < 0 || math.IsInf(c.WeightDecay, 0) || math.IsNaN(c.WeightDecay):
		return fmt.Errorf("%w: weight decay %v must be non-negative", ErrConfig, c.WeightDecay)
	case c.BatchSize <= 0:
		return fmt.Errorf("%w: batch size %d must be positive", ErrConfig, c.BatchSize)
	case c.Epochs <= 0:
		return fmt.Errorf("%w: %d epochs, want at least 1", ErrConfig, c.Epochs)
	case c.MinSteps < 0:
		return fmt.Errorf("%w: min steps %d must not be negative", ErrConfig, c.MinSteps)
	case c.Shift < 0 || c.Shift > 64:
		return fmt.Errorf("%w: shift %d must be in [0,64]", ErrConfig, c.Shift)
	case c.Augment != (Augment{}) && c.Shift != 0:
		return fmt.Errorf("%w: both shift %d and augment are set; give the shift inside augment", ErrConfig, c.Shift)
	}
	return c.Augment.Validate()
}

// view returns the function that writes the training view of one example
// (src) into dst: the example distorted by Augment, moved by up to Shift
// pixels, or copied, drawing from r. Data that are not images are copied.
func (c TrainConfig) view(sh data.Shape, r *rand.Rand) func(dst, src []float32) {
	image := sh.Height > 1 && sh.Width > 1
	switch {
	case image && c.Augment != (Augment{}):
		return func(dst, src []float32) { c.Augment.Apply(dst, src, sh, r) }
	case image && c.Shift > 0:
		s := c.Shift
		return func(dst, src []float32) { translate(dst, src, sh, r.IntN(2*s+1)-s, r.IntN(2*s+1)-s) }
	}
	return func(dst, src []float32) { copy(dst, src) }
}

// Steps is the number of minibatch steps training on n examples takes, and
// the number of epochs.
func (c TrainConfig) Steps(n int) (steps, epochs int) {
	per := (n + c.BatchSize - 1) / c.BatchSize
	epochs = c.Epochs
	if per > 0 && c.MinSteps > per*epochs {
		epochs = (c.MinSteps + per - 1) / per
	}
	return per * epochs, epochs
}

// Progress receives the number of examples processed so far and the total.
type Progress func(done, total int)

// Result summarises a training run.
type Result struct {
	Epochs    int
	Steps     int
	Examples  int     // examples processed (epochs × data size)
	FinalLoss float64 // mean training loss over the last epoch
}

// Train fits the network to d with minibatch gradient descent. The order of
// examples is reshuffled each epoch from cfg.Seed, so the same network,
// data and settings give the same weights. progress may be nil.
func (n *Network) Train(ctx context.Context, d *data.Dataset, cfg TrainConfig, progress Progress) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if err := n.checkData(d); err != nil {
		return Result{}, err
	}
	N := d.Len()
	if N == 0 {
		return Result{}, fmt.Errorf("%w: no training examples", ErrInput)
	}
	steps, epochs := cfg.Steps(N)
	opt := newOptimizer(cfg, n.ps)
	r := rand.New(rand.NewPCG(cfg.Seed, 0x73687566666c65))
	perm := make([]int, N)
	for i := range perm {
		perm[i] = i
	}
	dim := d.Dim()
	bs := min(cfg.BatchSize, N)
	xb := make([]float32, bs*dim)
	yb := make([]int, bs)
	res := Result{Epochs: epochs, Steps: steps, Examples: epochs * N}
	view := cfg.view(d.Shape, r)
	step, done := 0, 0
	for range epochs {
		r.Shuffle(N, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		epochLoss := 0.0
		for lo := 0; lo < N; lo += bs {
			if err := ctxErr(ctx); err != nil {
				return res, err
			}
			hi := min(lo+bs, N)
			b := hi - lo
			for j, i := range perm[lo:hi] {
				view(xb[j*dim:(j+1)*dim], d.Row(i))
				yb[j] = d.Y[i]
			}
			epochLoss += n.lossGrad(xb[:b*dim], yb[:b])
			lr := cfg.LearnRate
			if cfg.Cosine {
				lr *= 0.5 * (1 + math.Cos(math.Pi*float64(step)/float64(steps)))
			}
			opt.step(lr)
			step++
			done += b
			if progress != nil {
				progress(done, epochs*N)
			}
		}
		res.FinalLoss = epochLoss / float64(N)
	}
	if math.IsNaN(res.FinalLoss) || math.IsInf(res.FinalLoss, 0) {
		return res, fmt.Errorf("%w: training diverged (loss %v); lower the learning rate", ErrConfig, res.FinalLoss)
	}
	return res, nil
}

// optimizer applies gradient steps to a network's parameters.
type optimizer struct {
	cfg  TrainConfig
	ps   []*param
	m, v [][]float32
	t    int
	// decay[i] reports whether parameter i gets weight decay (weights, not biases).
	decay []bool
}

func newOptimizer(cfg TrainConfig, ps []*param) *optimizer {
	o := &optimizer{cfg: cfg, ps: ps, m: make([][]float32, len(ps)), decay: make([]bool, len(ps))}
	if cfg.Optimizer == Adam {
		o.v = make([][]float32, len(ps))
	}
	for i, p := range ps {
		o.m[i] = make([]float32, len(p.w))
		if o.v != nil {
			o.v[i] = make([]float32, len(p.w))
		}
		// Layers list their weights before their biases: even entries are weights.
		o.decay[i] = i%2 == 0
	}
	return o
}

func (o *optimizer) step(lr float64) {
	o.t++
	wd := float32(o.cfg.WeightDecay)
	switch o.cfg.Optimizer {
	case SGD:
		mu, eta := float32(o.cfg.Momentum), float32(lr)
		for i, p := range o.ps {
			m := o.m[i]
			d := wd
			if !o.decay[i] {
				d = 0
			}
			for j, g := range p.g {
				g += d * p.w[j]
				m[j] = mu*m[j] + g
				p.w[j] -= eta * m[j]
			}
		}
	case Adam:
		const b1, b2, eps = 0.9, 0.999, 1e-8
		c1 := 1 - math.Pow(b1, float64(o.t))
		c2 := 1 - math.Pow(b2, float64(o.t))
		alpha := float32(lr * math.Sqrt(c2) / c1)
		for i, p := range o.ps {
			m, v := o.m[i], o.v[i]
			d := wd
			if !o.decay[i] {
				d = 0
			}
			for j, g := range p.g {
				g += d * p.w[j]
				m[j] = b1*m[j] + (1-b1)*g
				v[j] = b2*v[j] + (1-b2)*g*g
				p.w[j] -= alpha * m[j] / (float32(math.Sqrt(float64(v[j]))) + eps)
			}
		}
	}
}

// Translate writes src (an image of shape sh, channel-last) moved by
// (dy, dx) pixels into dst, filling uncovered pixels with zero. dst and src
// must not overlap.
func Translate(dst, src []float32, sh data.Shape, dy, dx int) { translate(dst, src, sh, dy, dx) }

// translate writes src (an HWC image) moved by (dy, dx) pixels into dst,
// filling uncovered pixels with zero.
func translate(dst, src []float32, sh data.Shape, dy, dx int) {
	clear(dst)
	H, W, C := sh.Height, sh.Width, sh.Channels
	x0, x1 := max(0, dx), min(W, W+dx)
	if x0 >= x1 {
		return
	}
	for y := max(0, dy); y < min(H, H+dy); y++ {
		sy := y - dy
		copy(dst[(y*W+x0)*C:(y*W+x1)*C], src[(sy*W+x0-dx)*C:(sy*W+x1-dx)*C])
	}
}
