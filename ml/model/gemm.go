package model

import (
	"math/rand/v2"
	"time"
)

// GEMMRate measures this machine's single-precision matrix-product speed in
// GFLOP/s with gonum's BLAS: it multiplies two random size×size matrices
// repeatedly for at least minDuration and returns 2·size³·reps / seconds.
// Reports use it to state what fraction of the machine a model achieves.
func GEMMRate(size int, minDuration time.Duration) float64 {
	r := rand.New(rand.NewPCG(1, 2))
	a := make([]float32, size*size)
	b := make([]float32, size*size)
	c := make([]float32, size*size)
	for i := range a {
		a[i], b[i] = r.Float32(), r.Float32()
	}
	reps := 0
	start := time.Now()
	for {
		sgemm(false, false, size, size, size, a, size, b, size, 0, c, size)
		reps++
		if el := time.Since(start); el >= minDuration {
			return 2 * float64(size) * float64(size) * float64(size) * float64(reps) / el.Seconds() / 1e9
		}
	}
}
