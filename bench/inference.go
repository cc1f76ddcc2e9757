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
//
// FLOPs are counted as for dense inputs. gonum's GEMM skips a multiplier
// that is exactly zero, and most MNIST pixels are zero, so on MNIST the
// ensemble performs far fewer operations than it is credited with and its
// "fraction" can exceed 1. MLP.Dense therefore repeats the MLP measurement
// on random inputs without zeros: that is the fraction of the machine the
// ensemble's own code reaches, and the one the target is judged on.
type InferenceSection struct {
	Teachers   int    `json:"teachers"`
	Data       string `json:"data"`
	GEMMGFLOPs Figure `json:"gemm_gflops"`
	GEMMSize   int    `json:"gemm_size"`
	MLP        Votes  `json:"mlp"`
	CNN        Votes  `json:"cnn"`
}

// DenseVotes are the MLP's figures on random queries with no zero
// element, where every counted FLOP is performed.
type DenseVotes struct {
	VotesPerS      Figure `json:"votes_per_s"`
	GFLOPs         Figure `json:"gflops"`
	FractionOfGEMM Figure `json:"fraction_of_gemm"`
}

// Votes are one architecture's ensemble figures.
type Votes struct {
	Queries        int    `json:"queries"`
	FLOPsPerQuery  int    `json:"flops_per_query"`
	VotesPerS      Figure `json:"votes_per_s"`
	GFLOPs         Figure `json:"gflops"`
	FractionOfGEMM Figure `json:"fraction_of_gemm"`
	// ZeroInputs is the fraction of the queries' input elements that are
	// exactly zero (work gonum's GEMM skips in the first layer).
	ZeroInputs float64 `json:"zero_inputs"`
	// Dense is set for the MLP only.
	Dense *DenseVotes `json:"dense,omitempty"`
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
		v := Votes{Queries: n, FLOPsPerQuery: nets[0].FLOPs(), ZeroInputs: zeroFraction(x)}
		if v.VotesPerS, v.GFLOPs, v.FractionOfGEMM, err = measureVotes(ctx, cfg, nets, x, n, sec.GEMMGFLOPs.Median); err != nil {
			return sec, err
		}
		if kind == "mlp" {
			r := mrand.New(mrand.NewPCG(cfg.Seed, 4))
			dense := make([]float32, len(x))
			for j := range dense {
				dense[j] = 1 - r.Float32() // in (0, 1]: never zero
			}
			d := &DenseVotes{}
			if d.VotesPerS, d.GFLOPs, d.FractionOfGEMM, err = measureVotes(ctx, cfg, nets, dense, n, sec.GEMMGFLOPs.Median); err != nil {
				return sec, err
			}
			v.Dense = d
		}
		if kind == "mlp" {
			sec.MLP = v
		} else {
			sec.CNN = v
		}
	}
	progress("inference", 3, 3)
	return sec, nil
}

// measureVotes times the ensemble's votes on the n queries in x, cfg.Reps
// times, and converts each rate to dense-equivalent GFLOP/s and to a
// fraction of gemm GFLOP/s.
func measureVotes(ctx context.Context, cfg Config, nets []*model.Network, x []float32, n int, gemm float64) (rate, gflops, frac Figure, err error) {
	var rates []float64
	rate, err = repeat(ctx, cfg.Reps, func(int) (float64, error) {
		start := time.Now()
		if _, err := ensemble.Votes(ctx, nets, x, 10); err != nil {
			return 0, err
		}
		r := float64(n) / time.Since(start).Seconds()
		rates = append(rates, r)
		return r, nil
	})
	if err != nil {
		return rate, gflops, frac, err
	}
	gf, fr := make([]float64, len(rates)), make([]float64, len(rates))
	for j, r := range rates {
		gf[j] = r * float64(len(nets)) * float64(nets[0].FLOPs()) / 1e9
		fr[j] = gf[j] / gemm
	}
	return rate, NewFigure(gf), NewFigure(fr), nil
}

// zeroFraction is the fraction of x's elements that are exactly zero.
func zeroFraction(x []float32) float64 {
	if len(x) == 0 {
		return 0
	}
	z := 0
	for _, v := range x {
		if v == 0 {
			z++
		}
	}
	return float64(z) / float64(len(x))
}
