package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/nzcfed/nzc/ml/data"
)

// Network is a trained or trainable classifier built from a Spec.
// It is not safe for concurrent use: Clone it for each goroutine.
type Network struct {
	spec   Spec
	layers []layer
	ps     []*param
	probs  []float32 // softmax scratch
}

// New builds a network with weights initialised from seed (He-normal for
// layers followed by ReLU, 1/√fan-in for the output layer, zero biases).
func New(spec Spec, seed uint64) (*Network, error) {
	if _, err := spec.Validate(); err != nil {
		return nil, err
	}
	return build(spec, &weights{r: rand.New(rand.NewPCG(seed, 0x6e7a636d6f64656c))}), nil
}

// build makes the layers of a valid spec with the parameters wi makes.
func build(spec Spec, wi *weights) *Network {
	n := &Network{spec: spec}
	sh := spec.Input
	for _, c := range spec.Conv {
		n.layers = append(n.layers, newConv(sh, c.Filters, c.Kernel, wi))
		sh = data.Shape{Height: sh.Height, Width: sh.Width, Channels: c.Filters}
		n.layers = append(n.layers, &relu{n: sh.Size()})
		p := &maxPool{in: sh}
		n.layers = append(n.layers, p)
		sh = p.out()
	}
	in := sh.Size()
	for _, h := range spec.Hidden {
		n.layers = append(n.layers, newDense(in, h, math.Sqrt2, wi), &relu{n: h})
		in = h
	}
	n.layers = append(n.layers, newDense(in, spec.Classes, 1, wi))
	for _, l := range n.layers {
		n.ps = append(n.ps, l.params()...)
	}
	return n
}

// Spec returns the architecture.
func (n *Network) Spec() Spec { return n.spec }

// NumParams is the number of trainable parameters.
func (n *Network) NumParams() int {
	t := 0
	for _, p := range n.ps {
		t += len(p.w)
	}
	return t
}

// FLOPs is the number of floating-point operations of one example's forward
// pass in the dense and convolution layers (2 per multiply-add).
func (n *Network) FLOPs() int {
	t := 0
	for _, l := range n.layers {
		t += l.flops()
	}
	return t
}

// Clone returns an independent copy with the same weights.
func (n *Network) Clone() *Network {
	return build(n.spec, &weights{from: n.ps})
}

// Reader returns a network that computes with n's weights, shared and
// read only, and its own scratch memory, dropped with it: for inference
// beside other readers of n. It cannot be trained, and n must not train
// while it is in use.
func (n *Network) Reader() *Network {
	return build(n.spec, &weights{from: n.ps, share: true})
}

func (n *Network) forward(x []float32, batch int) []float32 {
	for _, l := range n.layers {
		x = l.forward(x, batch)
	}
	return x
}

// ErrInput reports input whose size does not match the network.
var ErrInput = errors.New("input does not match the model")

// inferenceBatch is how many examples go through the network at once when
// predicting: large enough that each layer is one efficient matrix product,
// small enough that the largest per-batch buffer (the unrolled input of a
// convolution) stays near the processor's cache (about 2M values), since a
// batch streamed from main memory is slower than a smaller one.
func (n *Network) inferenceBatch() int {
	per := n.spec.Input.Size()
	for _, l := range n.layers {
		if c, ok := l.(*conv); ok {
			per = max(per, c.kdim()*c.pixels())
		}
	}
	return min(256, max(16, (1<<21)/per))
}

// Logits computes the class scores of the count examples in x (row-major,
// Input.Size() features each) and writes them to out (count×Classes, grown
// if needed). Many examples go through each layer as one matrix product.
func (n *Network) Logits(x []float32, out []float32) ([]float32, error) {
	dim, k := n.spec.Input.Size(), n.spec.Classes
	if len(x)%dim != 0 {
		return nil, fmt.Errorf("%w: %d values is not a whole number of %d-feature examples", ErrInput, len(x), dim)
	}
	count := len(x) / dim
	out = grow(out, count*k)
	bs := n.inferenceBatch()
	for lo := 0; lo < count; lo += bs {
		hi := min(lo+bs, count)
		y := n.forward(x[lo*dim:hi*dim], hi-lo)
		copy(out[lo*k:hi*k], y)
	}
	return out, nil
}

// Predict returns the most likely class of each example in x (ties go to the
// lowest class index).
func (n *Network) Predict(x []float32) ([]int, error) {
	logits, err := n.Logits(x, nil)
	if err != nil {
		return nil, err
	}
	k := n.spec.Classes
	out := make([]int, len(logits)/k)
	for i := range out {
		out[i] = Argmax(logits[i*k : (i+1)*k])
	}
	return out, nil
}

// Probabilities returns the softmax class probabilities of the count
// examples in x (count×Classes, row-major), computed in large batches.
func (n *Network) Probabilities(x []float32) ([]float32, error) {
	logits, err := n.Logits(x, nil)
	if err != nil {
		return nil, err
	}
	k := n.spec.Classes
	for i := 0; i < len(logits); i += k {
		row := logits[i : i+k]
		_, s := expShifted(row, row)
		for j := range row {
			row[j] = float32(float64(row[j]) / s)
		}
	}
	return logits, nil
}

// expShifted is the numerically safe half of a softmax: it returns the
// largest logit's index top and s = Σ exp(v − row[top]) over the row, and
// writes each term to dst when dst is not nil (dst may be row itself).
// The softmax is then dst/s, and the log-probability of class c
// row[c] − row[top] − log s.
func expShifted(dst, row []float32) (top int, s float64) {
	top = Argmax(row)
	m := row[top]
	for j, v := range row {
		e := math.Exp(float64(v - m))
		if dst != nil {
			dst[j] = float32(e)
		}
		s += e
	}
	return top, s
}

// Argmax is the class that a row of scores (logits or probabilities) votes
// for: the index of the largest, ties to the lowest. ONNX teachers vote by
// it too, so a network exported to ONNX votes as it did in Go.
func Argmax(v []float32) int {
	best := 0
	for j, x := range v {
		if x > v[best] {
			best = j
		}
	}
	return best
}

// lossGrad runs one forward and backward pass on a batch and leaves the
// gradient of the mean cross-entropy in the parameters' g. It returns the
// summed loss over the batch.
func (n *Network) lossGrad(x []float32, y []int) float64 { return n.weightedLossGrad(x, y, nil) }

// weightedLossGrad is lossGrad with the loss Σ w[i]·CE(i) in place of the
// mean (w nil: w[i] = 1/batch). It returns the unweighted summed loss.
func (n *Network) weightedLossGrad(x []float32, y []int, w []float32) float64 {
	batch := len(y)
	logits := n.forward(x, batch)
	k := n.spec.Classes
	n.probs = grow(n.probs, batch*k)
	loss := 0.0
	for i := range batch {
		inv := float32(1) / float32(batch)
		if w != nil {
			inv = w[i]
		}
		row := logits[i*k : (i+1)*k]
		p := n.probs[i*k : (i+1)*k]
		top, s := expShifted(p, row)
		loss += math.Log(s) - float64(row[y[i]]-row[top])
		is := float32(1 / s)
		for j := range p {
			p[j] *= is * inv
		}
		p[y[i]] -= inv
	}
	g := n.probs
	for i := len(n.layers) - 1; i >= 0; i-- {
		g = n.layers[i].backward(g, batch, i > 0)
	}
	return loss
}

// Loss is the mean cross-entropy of the network on (x, y).
func (n *Network) Loss(x []float32, y []int) (float64, error) {
	logits, err := n.Logits(x, nil)
	if err != nil {
		return 0, err
	}
	if len(logits) != len(y)*n.spec.Classes {
		return 0, fmt.Errorf("%w: %d labels for %d examples", ErrInput, len(y), len(logits)/n.spec.Classes)
	}
	k := n.spec.Classes
	loss := 0.0
	for i, c := range y {
		row := logits[i*k : (i+1)*k]
		top, s := expShifted(nil, row)
		loss += math.Log(s) - float64(row[c]-row[top])
	}
	return loss / float64(len(y)), nil
}

// Accuracy is the fraction of examples of d that the network classifies correctly.
func (n *Network) Accuracy(d *data.Dataset) (float64, error) {
	if d.Len() == 0 {
		return 0, nil
	}
	pred, err := n.Predict(d.X)
	if err != nil {
		return 0, err
	}
	ok := 0
	for i, p := range pred {
		if p == d.Y[i] {
			ok++
		}
	}
	return float64(ok) / float64(len(pred)), nil
}

// checkData reports whether d fits the network's input and classes.
func (n *Network) checkData(d *data.Dataset) error {
	if d.Shape.Size() != n.spec.Input.Size() {
		return fmt.Errorf("%w: data has %v features per example, the model takes %v", ErrInput, d.Shape, n.spec.Input)
	}
	if d.Classes > n.spec.Classes {
		return fmt.Errorf("%w: data has %d classes, the model %d", ErrInput, d.Classes, n.spec.Classes)
	}
	if len(d.X) != d.Len()*d.Dim() {
		return fmt.Errorf("%w: %d feature values for %d examples", ErrInput, len(d.X), d.Len())
	}
	return nil
}

// ctxErr is a cheap cancellation check.
func ctxErr(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
		return nil
	}
}
