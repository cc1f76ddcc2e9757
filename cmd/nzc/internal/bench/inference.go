package bench

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"time"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/model"
)

// InferenceSection is the teachers' ensemble speed: vote histograms per
// second of Teachers MNIST models, and the fraction of the machine's
// measured GEMM throughput the ensemble reaches (its FLOPs per second over
// GEMMGFLOPs).
type InferenceSection struct {
	Teachers   int    `json:"teachers"`
	Data       string `json:"data"`
	GEMMGFLOPs Figure `json:"gemm_gflops"`
	GEMMSize   int    `json:"gemm_size"`
	MLP        Votes  `json:"mlp"`
	CNN        Votes  `json:"cnn"`
}

// Votes are one architecture's ensemble figures.
type Votes struct {
	Queries        int    `json:"queries"`
	FLOPsPerQuery  int    `json:"flops_per_query"`
	VotesPerS      Figure `json:"votes_per_s"`
	GFLOPs         Figure `json:"gflops"`
	FractionOfGEMM Figure `json:"fraction_of_gemm"`
}

// teachers returns n models of the given architecture with distinct random
// weights. Inference costs the same whatever the weights, so the bench does
// not spend minutes training them.
func teachers(kind string, n int, seed uint64) ([]*model.Network, error) {
	spec, err := model.Preset(kind, mnistShape(), 10)
	if err != nil {
		return nil, err
	}
	nets := make([]*model.Network, n)
	for i := range nets {
		if nets[i], err = model.New(spec, ensemble.TeacherSeed(seed, i)); err != nil {
			return nil, err
		}
	}
	return nets, nil
}

func mnistShape() data.Shape { return data.Shape{Height: 28, Width: 28, Channels: 1} }

// loadQueries returns n MNIST test images from dir (the t10k files, plain
// or gzipped), or n random MNIST-shaped images when dir has none; the
// string says which.
func loadQueries(dir string, n int, seed uint64) (*data.Dataset, string, error) {
	if d, ok := mnistTest(dir); ok {
		if d.Shape != mnistShape() {
			return nil, "", fmt.Errorf("%s holds %s images, not MNIST's 28x28x1", dir, d.Shape)
		}
		out := &data.Dataset{Shape: d.Shape, Classes: d.Classes}
		for len(out.Y) < n { // wrap around for more queries than test images
			part := d.Slice(0, min(n-len(out.Y), d.Len()))
			out.X, out.Y = append(out.X, part.X...), append(out.Y, part.Y...)
		}
		return out, "MNIST test images from " + dir, nil
	}
	r := mrand.New(mrand.NewPCG(seed, 3))
	d := &data.Dataset{X: make([]float32, n*mnistShape().Size()), Y: make([]int, n), Shape: mnistShape(), Classes: 10}
	for i := range d.X {
		d.X[i] = r.Float32()
	}
	for i := range d.Y {
		d.Y[i] = r.IntN(10)
	}
	return d, "random MNIST-shaped images (no MNIST found)", nil
}

func mnistTest(dir string) (*data.Dataset, bool) {
	if dir == "" {
		return nil, false
	}
	for _, suffix := range []string{"", ".gz"} {
		img := filepath.Join(dir, "t10k-images-idx3-ubyte"+suffix)
		lab := filepath.Join(dir, "t10k-labels-idx1-ubyte"+suffix)
		if d, err := data.LoadIDXPair(img, lab); err == nil && d.Len() > 0 {
			return d, true
		}
	}
	return nil, false
}

func runInference(ctx context.Context, cfg Config, q *data.Dataset, what string, progress Progress) (InferenceSection, error) {
	sec := InferenceSection{Teachers: cfg.Teachers, GEMMSize: cfg.GEMMSize}
	var err error
	progress("inference: GEMM reference", 0, 3)
	sec.GEMMGFLOPs, err = repeat(ctx, cfg.Reps, func(int) (float64, error) {
		return model.GEMMRate(cfg.GEMMSize, cfg.GEMMTime), nil
	})
	if err != nil {
		return sec, err
	}
	sec.Data = what
	for i, kind := range []string{"mlp", "cnn"} {
		progress("inference: "+kind, i+1, 3)
		n := cfg.MLPQueries
		if kind == "cnn" {
			n = cfg.CNNQueries
		}
		nets, err := teachers(kind, cfg.Teachers, cfg.Seed)
		if err != nil {
			return sec, err
		}
		x := q.X[:n*q.Dim()]
		v := Votes{Queries: n, FLOPsPerQuery: nets[0].FLOPs()}
		var rates []float64
		v.VotesPerS, err = repeat(ctx, cfg.Reps, func(int) (float64, error) {
			start := time.Now()
			if _, err := ensemble.Votes(ctx, nets, x, 10); err != nil {
				return 0, err
			}
			r := float64(n) / time.Since(start).Seconds()
			rates = append(rates, r)
			return r, nil
		})
		if err != nil {
			return sec, err
		}
		gf, frac := make([]float64, len(rates)), make([]float64, len(rates))
		for j, r := range rates {
			gf[j] = r * float64(cfg.Teachers) * float64(v.FLOPsPerQuery) / 1e9
			frac[j] = gf[j] / sec.GEMMGFLOPs.Median
		}
		v.GFLOPs, v.FractionOfGEMM = NewFigure(gf), NewFigure(frac)
		if kind == "mlp" {
			sec.MLP = v
		} else {
			sec.CNN = v
		}
	}
	progress("inference", 3, 3)
	return sec, nil
}
