//go:build !amd64 || purego

package model

func hasKernel() bool { return false }

func kernelNN(n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int) {
	panic("model: no matrix kernel on this platform")
}
