package model

import (
	"errors"
	"fmt"

	"github.com/nzcfed/nzc/ml/data"
)

// Model kinds.
const (
	KindSoftmax = "softmax" // softmax regression: one dense layer
	KindMLP     = "mlp"     // dense layers with ReLU
	KindCNN     = "cnn"     // convolution + ReLU + 2×2 max-pool blocks, then dense layers
)

// ErrSpec reports an architecture that cannot be built.
var ErrSpec = errors.New("invalid model specification")

// Conv describes one convolution block: Filters output channels, a square
// Kernel (odd, "same" padding, stride 1), ReLU, then 2×2 max pooling.
type Conv struct {
	Filters int `json:"filters"`
	Kernel  int `json:"kernel"`
}

// Spec is a model architecture.
type Spec struct {
	Kind    string     `json:"kind"`
	Input   data.Shape `json:"input"`
	Classes int        `json:"classes"`
	Conv    []Conv     `json:"conv,omitempty"`   // cnn only
	Hidden  []int      `json:"hidden,omitempty"` // widths of hidden dense layers (mlp, cnn)
}

// maxParams bounds the size of a model so that a corrupt or hostile
// specification cannot exhaust memory.
const maxParams = 1 << 26

// Validate checks the specification and returns its number of parameters.
func (s Spec) Validate() (int, error) {
	if s.Input.Height <= 0 || s.Input.Width <= 0 || s.Input.Channels <= 0 ||
		s.Input.Height > 4096 || s.Input.Width > 1<<20 || s.Input.Channels > 4096 || s.Input.Size() > 1<<24 {
		return 0, fmt.Errorf("%w: input shape %v out of range", ErrSpec, s.Input)
	}
	if s.Classes < 2 || s.Classes > 1<<16 {
		return 0, fmt.Errorf("%w: %d classes, want 2..65536", ErrSpec, s.Classes)
	}
	switch s.Kind {
	case KindSoftmax:
		if len(s.Hidden) > 0 || len(s.Conv) > 0 {
			return 0, fmt.Errorf("%w: softmax regression has no hidden or convolution layers", ErrSpec)
		}
	case KindMLP:
		if len(s.Conv) > 0 {
			return 0, fmt.Errorf("%w: an mlp has no convolution layers; use kind cnn", ErrSpec)
		}
	case KindCNN:
		if len(s.Conv) == 0 {
			return 0, fmt.Errorf("%w: a cnn needs at least one convolution block", ErrSpec)
		}
	default:
		return 0, fmt.Errorf("%w: unknown model kind %q (want softmax, mlp or cnn)", ErrSpec, s.Kind)
	}
	params := 0
	add := func(n int) error {
		params += n
		if n < 0 || params > maxParams {
			return fmt.Errorf("%w: more than %d parameters", ErrSpec, maxParams)
		}
		return nil
	}
	sh := s.Input
	for i, c := range s.Conv {
		if c.Filters <= 0 || c.Filters > 4096 || c.Kernel <= 0 || c.Kernel%2 == 0 || c.Kernel > 15 {
			return 0, fmt.Errorf("%w: convolution %d: %d filters of size %d (want 1..4096 filters, odd kernel 1..15)", ErrSpec, i, c.Filters, c.Kernel)
		}
		if err := add(c.Kernel*c.Kernel*sh.Channels*c.Filters + c.Filters); err != nil {
			return 0, err
		}
		sh = data.Shape{Height: sh.Height / 2, Width: sh.Width / 2, Channels: c.Filters}
		if sh.Height == 0 || sh.Width == 0 {
			return 0, fmt.Errorf("%w: input %v is too small for %d pooling steps", ErrSpec, s.Input, i+1)
		}
	}
	in := sh.Size()
	for i, h := range s.Hidden {
		if h <= 0 || h > 1<<16 {
			return 0, fmt.Errorf("%w: hidden layer %d has width %d, want 1..65536", ErrSpec, i, h)
		}
		if err := add(in*h + h); err != nil {
			return 0, err
		}
		in = h
	}
	if err := add(in*s.Classes + s.Classes); err != nil {
		return 0, err
	}
	return params, nil
}

func (s Spec) String() string {
	switch s.Kind {
	case KindCNN:
		return fmt.Sprintf("cnn%v%v", s.Conv, s.Hidden)
	case KindMLP:
		return fmt.Sprintf("mlp%v", s.Hidden)
	}
	return s.Kind
}
