package experiment

import (
	"fmt"

	"github.com/nzcfed/nzc/ml/data"
)

// DatasetMNISTHard is the harder data set made from MNIST alone
// (MNISTHard): the project's own robustness set, on which planner settings
// are tuned alongside the tuning share.
const DatasetMNISTHard = "mnist-hard"

// MNISTHard is how mnist-hard is made from MNIST's idx files: every image
// loses a square of 14×14 pixels, a quarter of it, at a place drawn for
// that image, and gets pixel noise of standard deviation 0.1
// (data.Hardening).
func MNISTHard() data.Hardening { return data.Hardening{Block: 14, Noise: 0.1, Seed: 1} }

// Derive returns the data set named name made from split: split itself
// for "" or "mnist", the hardened set for DatasetMNISTHard.
func Derive(name string, split *data.Split) (*data.Split, error) {
	switch name {
	case "", "mnist":
		return split, nil
	case DatasetMNISTHard:
		h, err := MNISTHard().ApplySplit(split)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, name, err)
		}
		return h, nil
	}
	return nil, fmt.Errorf("%w: unknown data set %q (want mnist or %s)", ErrConfig, name, DatasetMNISTHard)
}
