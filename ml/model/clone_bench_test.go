package model

import (
	"testing"

	"github.com/nzcfed/nzc/ml/data"
)

// BenchmarkClone copies a 784-256-10 MLP; BenchmarkReader makes the
// weight-sharing reader the ensemble makes of every teacher for every batch.
func BenchmarkClone(b *testing.B) {
	n := benchMLP(b)
	for b.Loop() {
		n.Clone()
	}
}

func BenchmarkReader(b *testing.B) {
	n := benchMLP(b)
	for b.Loop() {
		n.Reader()
	}
}

func benchMLP(b *testing.B) *Network {
	n, err := New(Spec{Kind: KindMLP, Input: data.Shape{Height: 28, Width: 28, Channels: 1}, Classes: 10, Hidden: []int{256}}, 1)
	if err != nil {
		b.Fatal(err)
	}
	return n
}
