package model

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
)

// mnistShape is the shape of an MNIST image.
func mnistShape() data.Shape { return data.Shape{Height: 28, Width: 28, Channels: 1} }

func fakeImages(n int) *data.Dataset {
	r := rand.New(rand.NewPCG(1, 1))
	d := &data.Dataset{X: make([]float32, n*mnistShape().Size()), Y: make([]int, n), Shape: mnistShape(), Classes: 10}
	for i := range d.X {
		d.X[i] = r.Float32()
	}
	for i := range d.Y {
		d.Y[i] = r.IntN(10)
	}
	return d
}

// BenchmarkGEMM measures the machine's single-precision GEMM rate, the
// ceiling for everything else here.
func BenchmarkGEMM(b *testing.B) {
	const n = 512
	a, x, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], x[i] = float32(i%7), float32(i%5)
	}
	c0 := cpuSeconds()
	for b.Loop() {
		sgemm(false, false, n, n, n, a, n, x, n, 0, c, n)
	}
	b.ReportMetric(2*n*n*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	reportCPU(b, c0, 2*n*n*n*float64(b.N)/1e9, "GFLOP/cpu-s")
}

func benchModels() []string { return PresetNames() }

// benchNetwork is a network of the preset name for MNIST-shaped images.
func benchNetwork(b *testing.B, name string) *Network {
	b.Helper()
	spec, err := Preset(name, mnistShape(), 10)
	if err != nil {
		b.Fatal(err)
	}
	n, err := New(spec, 1)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// reportRates reports how many samples went through per second and per
// CPU-second since c0, and the same as GFLOP at flops per sample.
func reportRates(b *testing.B, c0 float64, samples int, flops float64) {
	sps := float64(samples) / b.Elapsed().Seconds()
	b.ReportMetric(sps, "samples/s")
	b.ReportMetric(sps*flops/1e9, "GFLOP/s")
	reportCPU(b, c0, float64(samples), "samples/cpu-s")
	reportCPU(b, c0, float64(samples)*flops/1e9, "GFLOP/cpu-s")
}

// BenchmarkTrain measures training throughput on MNIST-shaped data
// (minibatch 64, Adam); GFLOP/s counts forward + backward as 3× forward.
func BenchmarkTrain(b *testing.B) {
	for _, name := range benchModels() {
		b.Run(name, func(b *testing.B) {
			n := benchNetwork(b, name)
			d := fakeImages(512)
			cfg := TrainConfig{Optimizer: Adam, LearnRate: 1e-3, BatchSize: 64, Epochs: 1, Seed: 1}
			c0 := cpuSeconds()
			for b.Loop() {
				if _, err := n.Train(context.Background(), d, cfg, nil); err != nil {
					b.Fatal(err)
				}
			}
			reportRates(b, c0, b.N*d.Len(), 3*float64(n.FLOPs()))
		})
	}
}

// reportCPU reports work per CPU-second since c0 (user + system time of
// the whole process, all cores): on a machine shared with other jobs the
// wall-clock rates understate what the code does, and the CPU-time rates
// of the models and of BenchmarkGEMM stay comparable.
func reportCPU(b *testing.B, c0, work float64, unit string) {
	if d := cpuSeconds() - c0; d > 0 {
		b.ReportMetric(work/d, unit)
	}
}

// BenchmarkInfer measures batched inference throughput (the ensemble's hot path).
func BenchmarkInfer(b *testing.B) {
	for _, name := range benchModels() {
		b.Run(name, func(b *testing.B) {
			n := benchNetwork(b, name)
			d := fakeImages(1024)
			var out []float32
			c0 := cpuSeconds()
			for b.Loop() {
				out, _ = n.Logits(d.X, out)
			}
			reportRates(b, c0, b.N*d.Len(), float64(n.FLOPs()))
		})
	}
}

// BenchmarkConsistencyCNN measures the demo student's training step: the
// cnn preset trained by consistency (minibatch 32, two unlabelled examples
// per labelled one, the default strong view) on MNIST-shaped data; one
// iteration is one pass over 640 unlabelled examples (10 steps).
func BenchmarkConsistencyCNN(b *testing.B) {
	n := benchNetwork(b, KindCNN)
	lab, unl := fakeImages(64), fakeImages(640)
	cfg := TrainConfig{Optimizer: Adam, LearnRate: 1e-3, BatchSize: 32, Epochs: 1, Shift: 1, Seed: 1}
	cc := Consistency{Threshold: 1e-9, Weight: 1, Ratio: 2, Epochs: 1,
		Strong: Augment{Rotate: 12, Scale: 0.1, Shift: 3, Cutout: 8}} // a threshold near 0: every unlabelled example is trained on
	c0 := cpuSeconds()
	for b.Loop() {
		if _, err := n.TrainConsistency(context.Background(), lab, unl, cfg, cc, nil); err != nil {
			b.Fatal(err)
		}
	}
	sps := float64(b.N*(unl.Len()+unl.Len()/2)) / b.Elapsed().Seconds()
	b.ReportMetric(sps, "train-samples/s")
	reportCPU(b, c0, float64(b.N*(unl.Len()+unl.Len()/2)), "train-samples/cpu-s")
}
