package synth

import (
	"math/rand/v2"

	"github.com/nzcfed/nzc/ml/data"
)

// Shapes is a small image problem: Size×Size grey images of one of four
// strokes (a horizontal bar, a vertical bar, a cross, a hollow square) of
// side Stroke at a random place, plus Gaussian pixel noise. A model must
// learn each shape wherever it is, and a rotation by 90° turns a
// horizontal bar into a vertical one: a test of augmentations.
type Shapes struct {
	Size, Stroke int
	Noise        float64
}

// Make draws n labelled images with the given seed.
func (s Shapes) Make(seed uint64, n int) *data.Dataset {
	r := rand.New(rand.NewPCG(seed, 2))
	S, L := s.Size, s.Stroke
	ds := &data.Dataset{Shape: data.Shape{Height: S, Width: S, Channels: 1}, Classes: 4, X: make([]float32, 0, n*S*S)}
	img := make([]float32, S*S)
	for range n {
		k := r.IntN(4)
		clear(img)
		y0, x0 := r.IntN(S-L+1), r.IntN(S-L+1)
		set := func(y, x int) { img[(y0+y)*S+x0+x] = 1 }
		for i := range L {
			switch k {
			case 0:
				set(L/2, i)
			case 1:
				set(i, L/2)
			case 2:
				set(L/2, i)
				set(i, L/2)
			case 3:
				set(0, i)
				set(L-1, i)
				set(i, 0)
				set(i, L-1)
			}
		}
		for _, v := range img {
			ds.X = append(ds.X, v+float32(s.Noise*r.NormFloat64()))
		}
		ds.Y = append(ds.Y, k)
	}
	return ds
}
