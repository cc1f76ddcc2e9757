//go:build amd64 && !purego

package model

import "golang.org/x/sys/cpu"

// hasKernel reports whether kernelNN can run here (AVX2 and FMA).
func hasKernel() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// kernelNN adds A[0:4, 0:k]·B[0:k, 0:n] to C[0:4, 0:n] (row-major, leading
// dimensions in elements, n a multiple of 8); see gemm_amd64.s. The caller
// checks that every row and column touched lies inside the slices.
//
//go:noescape
func kernelNN(n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
