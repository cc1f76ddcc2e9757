package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/nzcfed/nzc/ml/data"
)

// Consistency configures semi-supervised consistency training in the
// FixMatch family (Sohn et al. 2020): every step trains on a minibatch of
// labelled examples (weakly augmented: TrainConfig.Shift or Augment) and on Ratio
// times as many unlabelled ones. For each unlabelled example the network,
// as it is at that step, predicts a class on a weak view; where the
// prediction's probability reaches Threshold, that class becomes the target
// of a strongly augmented view (Strong), weighted by Weight. The loss is
//
//	mean over labelled of CE(y, p(weak x)) + Weight · mean over unlabelled of 1[max p(weak u) ≥ Threshold]·CE(argmax p(weak u), p(strong u)).
//
// The network learns to give a distorted example the class it confidently
// gives the undistorted one, which spreads the few labels along the
// clusters of the unlabelled data.
type Consistency struct {
	// Threshold τ on the weak view's largest class probability, in (0, 1].
	Threshold float64 `json:"threshold"`
	// Weight λ of the unlabelled term; 0 turns consistency training off.
	Weight float64 `json:"weight"`
	// Ratio μ of unlabelled to labelled examples in a step.
	Ratio int `json:"ratio"`
	// Strong is the distortion of the unlabelled examples' second view.
	Strong Augment `json:"strong"`
	// Epochs over the unlabelled examples (each step uses Ratio ×
	// BatchSize of them); the training's own Epochs and MinSteps are
	// applied to the labelled examples and the larger count wins.
	Epochs int `json:"epochs"`
	// EMA, when above 0, is the decay of an exponential moving average of
	// the weights (a mean teacher, Tarvainen and Valpola 2017): the
	// averaged network, not the one being trained, predicts the weak views'
	// classes, and the trained network ends with the averaged weights.
	// The decay at step t is min(EMA, (1+t)/(10+t)), so the average forgets
	// the random initialisation quickly.
	EMA float64 `json:"ema,omitempty"`
}

// Enabled reports whether consistency training is on.
func (c Consistency) Enabled() bool { return c.Weight > 0 }

// Validate checks the settings.
func (c Consistency) Validate() error {
	if !c.Enabled() {
		if c.Weight < 0 || math.IsNaN(c.Weight) {
			return fmt.Errorf("%w: consistency weight %v must not be negative", ErrConfig, c.Weight)
		}
		return nil
	}
	switch {
	case math.IsInf(c.Weight, 0) || c.Weight > 100:
		return fmt.Errorf("%w: consistency weight %v must be at most 100", ErrConfig, c.Weight)
	case !(c.Threshold > 0 && c.Threshold <= 1):
		return fmt.Errorf("%w: consistency threshold %v must be in (0,1]", ErrConfig, c.Threshold)
	case c.Ratio < 1 || c.Ratio > 64:
		return fmt.Errorf("%w: consistency ratio %d must be in [1,64]", ErrConfig, c.Ratio)
	case c.Epochs < 1 || c.Epochs > 1000:
		return fmt.Errorf("%w: %d consistency epochs, want 1..1000", ErrConfig, c.Epochs)
	case !(c.EMA >= 0 && c.EMA < 1):
		return fmt.Errorf("%w: consistency EMA decay %v must be in [0,1) (0: off)", ErrConfig, c.EMA)
	}
	return c.Strong.Validate()
}

// ConsistencyResult summarises a consistency-training run.
type ConsistencyResult struct {
	Result
	// Masked is the fraction of unlabelled examples whose weak view was
	// confident enough to be trained on, over the last pass.
	Masked float64
}

// TrainConsistency fits the network to the labelled examples and, by
// consistency, to the unlabelled ones (see Consistency). Deterministic for
// a given network, data and settings (cfg.Seed). progress may be nil.
func (n *Network) TrainConsistency(ctx context.Context, labelled, unlabelled *data.Dataset, cfg TrainConfig, cc Consistency, progress Progress) (ConsistencyResult, error) {
	if err := cfg.Validate(); err != nil {
		return ConsistencyResult{}, err
	}
	if err := cc.Validate(); err != nil {
		return ConsistencyResult{}, err
	}
	if !cc.Enabled() || unlabelled.Len() == 0 {
		r, err := n.Train(ctx, labelled, cfg, progress)
		return ConsistencyResult{Result: r}, err
	}
	for _, d := range []*data.Dataset{labelled, unlabelled} {
		if err := n.checkData(d); err != nil {
			return ConsistencyResult{}, err
		}
	}
	L, U := labelled.Len(), unlabelled.Len()
	if L == 0 {
		return ConsistencyResult{}, fmt.Errorf("%w: no labelled examples", ErrInput)
	}
	bs := min(cfg.BatchSize, L)
	ub := cc.Ratio * cfg.BatchSize
	perU := (U + ub - 1) / ub
	steps := max(perU*cc.Epochs, func() int { s, _ := cfg.Steps(L); return s }())
	opt := newOptimizer(cfg, n.ps)
	r := rand.New(rand.NewPCG(cfg.Seed, 0x6669786d61746368))
	lperm, uperm := identity(L), identity(U)
	lpos, upos := L, U // reshuffle at first use
	dim, k, sh := labelled.Dim(), n.spec.Classes, labelled.Shape
	weak := cfg.view(sh, r)
	xu := make([]float32, ub*dim)
	xb := make([]float32, (bs+ub)*dim)
	yb := make([]int, bs+ub)
	wb := make([]float32, bs+ub)
	idx := make([]int, ub)
	res := ConsistencyResult{Result: Result{Steps: steps, Epochs: cc.Epochs}}
	masked, seen := 0, 0
	lastPass := steps - perU
	total := steps * (bs + ub)
	lossSum := 0.0
	var avg *Network // the mean teacher, with EMA on
	if cc.EMA > 0 {
		avg = n.Clone()
	}
	predictor := n
	if avg != nil {
		predictor = avg
	}
	for step := range steps {
		if err := ctxErr(ctx); err != nil {
			return res, err
		}
		// Labelled minibatch, weak views.
		for j := range bs {
			if lpos == L {
				r.Shuffle(L, func(a, b int) { lperm[a], lperm[b] = lperm[b], lperm[a] })
				lpos = 0
			}
			i := lperm[lpos]
			lpos++
			weak(xb[j*dim:(j+1)*dim], labelled.Row(i))
			yb[j], wb[j] = labelled.Y[i], 1/float32(bs)
		}
		// Unlabelled minibatch: weak views through the current network.
		m := min(ub, U)
		for j := range m {
			if upos == U {
				r.Shuffle(U, func(a, b int) { uperm[a], uperm[b] = uperm[b], uperm[a] })
				upos = 0
			}
			idx[j] = uperm[upos]
			upos++
			weak(xu[j*dim:(j+1)*dim], unlabelled.Row(idx[j]))
		}
		logits := predictor.forward(xu[:m*dim], m)
		b := bs
		for j := range m {
			c, p := softmaxMax(logits[j*k : (j+1)*k])
			if step >= lastPass {
				seen++
			}
			if p < cc.Threshold {
				continue
			}
			if step >= lastPass {
				masked++
			}
			cc.Strong.Apply(xb[b*dim:(b+1)*dim], unlabelled.Row(idx[j]), sh, r)
			yb[b], wb[b] = c, float32(cc.Weight/float64(m))
			b++
		}
		lossSum += n.weightedLossGrad(xb[:b*dim], yb[:b], wb[:b])
		lr := cfg.LearnRate
		if cfg.Cosine {
			lr *= 0.5 * (1 + math.Cos(math.Pi*float64(step)/float64(steps)))
		}
		opt.step(lr)
		if avg != nil {
			avg.average(n, min(cc.EMA, float64(1+step)/float64(10+step)))
		}
		res.Examples += b
		if progress != nil {
			progress((step+1)*(bs+ub), total)
		}
	}
	if avg != nil {
		for i, p := range n.ps {
			copy(p.w, avg.ps[i].w)
		}
	}
	if seen > 0 {
		res.Masked = float64(masked) / float64(seen)
	}
	res.FinalLoss = lossSum / float64(max(1, res.Examples))
	if math.IsNaN(res.FinalLoss) || math.IsInf(res.FinalLoss, 0) {
		return res, fmt.Errorf("%w: training diverged (loss %v); lower the learning rate", ErrConfig, res.FinalLoss)
	}
	return res, nil
}

func identity(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

// softmaxMax returns the most likely class of a row of logits and its
// softmax probability.
func softmaxMax(row []float32) (int, float64) {
	c, s := expShifted(nil, row)
	return c, 1 / s
}

// average moves every weight of n towards src's: w ← decay·w + (1−decay)·w_src.
func (n *Network) average(src *Network, decay float64) {
	a, b := float32(decay), float32(1-decay)
	for i, p := range n.ps {
		for j, v := range src.ps[i].w {
			p.w[j] = a*p.w[j] + b*v
		}
	}
}
