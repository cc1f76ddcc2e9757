package model

import (
	"math/rand/v2"
	"runtime"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
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

// Blocking of gemmNN: kc steps of the inner dimension and nc columns at a
// time, so that the block of B in use (kc × nc values, 256 KiB) stays in
// the core's L2 cache while every block of four rows of A passes over it.
const (
	gemmKC = 256
	gemmNC = 256
)

// gemmNN adds A·B to C, with A m×k, B k×n and C m×n row-major (leading
// dimensions lda, ldb, ldc). Blocks of four rows and a multiple of eight
// columns go through kernelNN (AVX2 and FMA), the edges through gonum's
// BLAS. The work is split over the cores by column blocks (or, when C is
// narrow, by blocks of rows), each writing its own part of C and summing
// the inner dimension in the same order, so the result does not depend on
// the number of cores.
func gemmNN(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m == 0 || n == 0 || k == 0 {
		return
	}
	m4, n8 := m&^3, n&^7
	if m4 > 0 && n8 > 0 {
		// Bounds of every access the kernel makes, checked once here.
		_ = a[(m4-1)*lda+k-1]
		_ = b[(k-1)*ldb+n8-1]
		_ = c[(m4-1)*ldc+n8-1]
		block := func(r0, r1, c0, c1 int) {
			for p0 := 0; p0 < k; p0 += gemmKC {
				kk := min(gemmKC, k-p0)
				for j0 := c0; j0 < c1; j0 += gemmNC {
					jn := min(gemmNC, c1-j0)
					for i := r0; i < r1; i += 4 {
						kernelNN(jn, kk, &a[i*lda+p0], lda, &b[p0*ldb+j0], ldb, &c[i*ldc+j0], ldc)
					}
				}
			}
		}
		work := 2 * m4 * n8 * k
		if cols := n8 / 8; cols >= 2*runtime.GOMAXPROCS(0) || cols >= m4/4 {
			parallelFor(cols, work, func(lo, hi int) { block(0, m4, 8*lo, 8*hi) })
		} else {
			parallelFor(m4/4, work, func(lo, hi int) { block(4*lo, 4*hi, 0, n8) })
		}
	}
	if n8 < n && m4 > 0 {
		gonum.Implementation{}.Sgemm(blas.NoTrans, blas.NoTrans, m4, n-n8, k, 1, a, lda, b[n8:], ldb, 1, c[n8:], ldc)
	}
	if m4 < m {
		gonum.Implementation{}.Sgemm(blas.NoTrans, blas.NoTrans, m-m4, n, k, 1, a[m4*lda:], lda, b, ldb, 1, c[m4*ldc:], ldc)
	}
}
