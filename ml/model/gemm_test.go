package model

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// TestGemmNN compares sgemm's product without transposes (the AVX2 kernel
// where the processor has it) with gonum's on seeded random matrices of
// the shapes the models use and of awkward ones (edges of fewer than four
// rows or eight columns, padded leading dimensions, beta 0 and 1), to
// within float32 rounding of the sums.
func TestGemmNN(t *testing.T) {
	if !hasKernel() {
		t.Log("no AVX2 and FMA here: sgemm is gonum's, compared with itself")
	}
	tests := []struct{ m, n, k, pad int }{
		{1, 1, 1, 0}, {4, 8, 1, 0}, {3, 7, 5, 0}, {4, 16, 25, 0}, {5, 17, 3, 2},
		{8, 784 * 3, 25, 0}, {16, 196*5 + 4, 200, 0}, {200, 9*196 + 12, 16, 3},
		{25, 8, 2000, 0}, {200, 16, 3000, 1}, {64, 64, 784, 0}, {33, 10, 64, 5},
		{12, 600, 300, 0}, {7, 1000, 513, 0},
	}
	r := rand.New(rand.NewPCG(3, 4))
	fill := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	for _, tc := range tests {
		for _, beta := range []float32{0, 1} {
			lda, ldb, ldc := tc.k+tc.pad, tc.n+tc.pad, tc.n+2*tc.pad
			a, b := fill(tc.m*lda), fill(tc.k*ldb)
			c0 := fill(tc.m * ldc)
			got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
			sgemm(false, false, tc.m, tc.n, tc.k, a, lda, b, ldb, beta, got, ldc)
			gonum.Implementation{}.Sgemm(blas.NoTrans, blas.NoTrans, tc.m, tc.n, tc.k, 1, a, lda, b, ldb, beta, want, ldc)
			for i := range tc.m {
				for j := range ldc {
					g, w := got[i*ldc+j], want[i*ldc+j]
					if j >= tc.n { // padding: untouched
						if g != c0[i*ldc+j] {
							t.Fatalf("%+v beta %v: padding C[%d,%d] changed", tc, beta, i, j)
						}
						continue
					}
					// Sums of k products of unit normals: rounding error grows like √k.
					if tol := 1e-5 * float64(tc.k+1); math.Abs(float64(g-w)) > tol {
						t.Fatalf("%+v beta %v: C[%d,%d] = %v, gonum %v", tc, beta, i, j, g, w)
					}
				}
			}
		}
	}
}

// TestGemmNNDeterministic: the product does not depend on how many cores
// share the work.
func TestGemmNNDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	m, n, k := 16, 196*64, 200
	a, b := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = r.Float32()
	}
	for i := range b {
		b[i] = r.Float32()
	}
	c1, c2 := make([]float32, m*n), make([]float32, m*n)
	sgemm(false, false, m, n, k, a, k, b, n, 0, c1, n)
	prev := runtime.GOMAXPROCS(1)
	sgemm(false, false, m, n, k, a, k, b, n, 0, c2, n)
	runtime.GOMAXPROCS(prev)
	for i := range c1 {
		if c1[i] != c2[i] {
			t.Fatalf("C[%d]: %v with %d cores, %v with one", i, c1[i], prev, c2[i])
		}
	}
}
