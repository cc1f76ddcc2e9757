// Package synth makes small, seeded classification data sets for tests:
// Gaussian clusters whose centres and samples come from fixed seeds, so a
// test's data are the same on every run.
package synth

import (
	"math/rand/v2"

	"github.com/nzcfed/nzc/ml/data"
)

// Blobs describes a problem of Gaussian clusters, one per class.
type Blobs struct {
	Classes int
	Dim     int
	// Spread scales the class centres, drawn from N(0, Spread²) per
	// coordinate; each sample adds N(0, 1) noise to its class centre.
	Spread float64
	// CentreSeed fixes the centres (a PCG seed pair), so that data sets
	// made with different sample seeds share one problem.
	CentreSeed [2]uint64
}

// Make draws n labelled samples of the problem with the given seed.
func (b Blobs) Make(seed uint64, n int) *data.Dataset {
	r := rand.New(rand.NewPCG(seed, 1))
	centres := rand.New(rand.NewPCG(b.CentreSeed[0], b.CentreSeed[1]))
	c := make([][]float64, b.Classes)
	for k := range c {
		c[k] = make([]float64, b.Dim)
		for j := range c[k] {
			c[k][j] = centres.NormFloat64() * b.Spread
		}
	}
	ds := &data.Dataset{Shape: data.Shape{Height: 1, Width: b.Dim, Channels: 1}, Classes: b.Classes}
	for range n {
		k := r.IntN(b.Classes)
		for j := range b.Dim {
			ds.X = append(ds.X, float32(c[k][j]+r.NormFloat64()))
		}
		ds.Y = append(ds.Y, k)
	}
	return ds
}
