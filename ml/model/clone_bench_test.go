package model

import (
	"testing"

	"github.com/nzcfed/nzc/ml/data"
)

// BenchmarkClone copies a 784-256-10 MLP, as the ensemble does for every
// teacher of every batch.
func BenchmarkClone(b *testing.B) {
	n, err := New(Spec{Kind: KindMLP, Input: data.Shape{Height: 28, Width: 28, Channels: 1}, Classes: 10, Hidden: []int{256}}, 1)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		n.Clone()
	}
}
