package model

import (
	"fmt"

	"github.com/nzcfed/nzc/ml/data"
)

// PresetNames lists the architecture presets accepted by Preset.
func PresetNames() []string {
	return []string{KindSoftmax, KindMLP, KindCNN, PresetSmallCNN, PresetSmallMLP, PresetWideCNN}
}

// PresetSmallCNN names a convolutional network small enough to train
// hundreds of teachers on one machine.
const PresetSmallCNN = "small-cnn"

// PresetSmallMLP names a dense network with one hidden layer of 32 units:
// about four times the cost of softmax regression, a fraction of mlp's,
// and, trained on a few hundred examples each, teachers that agree on
// more queries than softmax teachers do.
const PresetSmallMLP = "small-mlp"

// PresetWideCNN names the cnn preset with twice the filters and dense
// units: about four times its arithmetic, for a student that learns from a
// large unlabelled pool and can afford the time.
const PresetWideCNN = "wide-cnn"

// Preset returns a named architecture for data of the given shape:
//
//	softmax    softmax regression
//	mlp        one hidden layer of 256 ReLU units
//	small-mlp  one hidden layer of 32 ReLU units
//	cnn        two 5×5 convolution blocks (8 and 16 filters, each with 2×2
//	           max pooling) and a dense layer of 64 units; for inputs too
//	           small to pool twice, one block
//	wide-cnn   the cnn with 16 and 32 filters and a dense layer of 128
//	           units
//	small-cnn  two 3×3 convolution blocks (8 and 16 filters, each with 2×2
//	           max pooling) straight into the output layer; for inputs too
//	           small to pool twice, one block
func Preset(name string, input data.Shape, classes int) (Spec, error) {
	s := Spec{Kind: name, Input: input, Classes: classes}
	switch name {
	case KindSoftmax:
	case KindMLP:
		s.Hidden = []int{256}
	case PresetSmallMLP:
		s.Kind = KindMLP
		s.Hidden = []int{32}
	case KindCNN:
		s.Conv, s.Hidden = blocks(input, 8, 16, 5), []int{64}
	case PresetWideCNN:
		s.Kind = KindCNN
		s.Conv, s.Hidden = blocks(input, 16, 32, 5), []int{128}
	case PresetSmallCNN:
		s.Kind = KindCNN
		s.Conv = blocks(input, 8, 16, 3)
	default:
		return Spec{}, fmt.Errorf("%w: unknown model %q (want softmax, mlp, small-mlp, cnn, wide-cnn or small-cnn)", ErrSpec, name)
	}
	if _, err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// blocks are a preset's two convolution blocks of f1 and f2 filters of side
// kernel, or the first alone for inputs too small to pool twice.
func blocks(input data.Shape, f1, f2, kernel int) []Conv {
	c := []Conv{{Filters: f1, Kernel: kernel}, {Filters: f2, Kernel: kernel}}
	if input.Height < 4 || input.Width < 4 {
		return c[:1]
	}
	return c
}
