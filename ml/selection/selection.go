// Package selection orders a student's unlabelled pool: which queries to
// ask first. It looks only at the student's own data (and, for the
// confidence order, at a network trained on labels already released), so
// the order is post-processing of earlier releases and costs no privacy.
//
// The order matters most to the nzc-svt aggregator, which answers a query
// for free when its teachers agree and ends its session after K refusals:
// a student that asks first about the examples its teachers will surely
// agree on (typical examples of each kind) receives many exact labels
// before its first refusal. For the other aggregators a balanced,
// representative order gives the student more to learn from per label.
package selection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"gonum.org/v1/gonum/mat"

	"github.com/nzcfed/nzc/ml/data"
)

// Strategy names an order.
type Strategy string

// Strategies.
const (
	// Sequential asks in the pool's own order.
	Sequential Strategy = "sequential"
	// Random asks in a seeded random order.
	Random Strategy = "random"
	// Typical clusters the pool (k-means on the features, a few clusters
	// per class) and asks first for the clearest members of their
	// clusters: the examples whose distance to their own cluster's centre
	// is smallest relative to their distance to the next nearest centre.
	// Examples between two clusters (a 4 that could be a 9) come last.
	Typical Strategy = "typical"
	// Balanced clusters the pool in its principal components (k-means on
	// the projection onto the leading components of the pixels, a few
	// clusters per class) and asks in turn in every cluster, in proportion
	// to its size: the clearest member of each cluster first, then the
	// next clearest, and so on. Typical's global order favours the most
	// compact clusters (on MNIST, ones and zeros); Balanced gives every
	// kind of example its share from the start.
	Balanced Strategy = "balanced"
)

// Strategies lists the strategies Order accepts.
func Strategies() []Strategy { return []Strategy{Sequential, Random, Typical, Balanced} }

// ErrConfig reports settings that cannot work.
var ErrConfig = errors.New("invalid query selection")

// Config is how the pool is ordered.
type Config struct {
	Strategy Strategy `json:"strategy"`
	// Clusters for Typical and Balanced (0: 3 per class of the pool for
	// Typical, 5 for Balanced, at most a tenth of the pool).
	Clusters int `json:"clusters,omitempty"`
	// Components of the projection Balanced clusters in (0: 40, at most
	// the number of features).
	Components int `json:"components,omitempty"`
	// Iterations of k-means for Typical (0: 20).
	Iterations int    `json:"iterations,omitempty"`
	Seed       uint64 `json:"seed"`
}

// Validate checks the settings.
func (c Config) Validate() error {
	if !slices.Contains(Strategies(), c.Strategy) {
		names := make([]string, 0, 3)
		for _, s := range Strategies() {
			names = append(names, string(s))
		}
		return fmt.Errorf("%w: strategy %q, want one of %s", ErrConfig, c.Strategy, strings.Join(names, ", "))
	}
	if c.Clusters < 0 || c.Iterations < 0 || c.Iterations > 1000 {
		return fmt.Errorf("%w: %d clusters and %d iterations, want non-negative (iterations at most 1000)", ErrConfig, c.Clusters, c.Iterations)
	}
	if c.Components < 0 || c.Components > 1000 {
		return fmt.Errorf("%w: %d principal components, want 0 (the default) to 1000", ErrConfig, c.Components)
	}
	return nil
}

// Order returns a permutation of the pool's indices: the order in which to
// ask. The pool's labels are never read.
func Order(ctx context.Context, cfg Config, pool *data.Dataset) ([]int, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := pool.Len()
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	switch cfg.Strategy {
	case Sequential:
		return order, nil
	case Random:
		r := rand.New(rand.NewPCG(cfg.Seed, 0x72616e646f6d))
		r.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
		return order, nil
	}
	perClass := 3
	if cfg.Strategy == Balanced {
		perClass = 5
	}
	k := cfg.Clusters
	if k == 0 {
		k = min(perClass*max(1, pool.Classes), n/10)
	}
	k = max(1, min(k, n))
	it := cfg.Iterations
	if it == 0 {
		it = 20
	}
	feat := rows(pool)
	if cfg.Strategy == Balanced {
		c := cfg.Components
		if c == 0 {
			c = 40
		}
		var err error
		if feat, err = project(ctx, pool, min(c, pool.Dim())); err != nil {
			return nil, err
		}
	}
	assign, dist, second, err := kmeans(ctx, feat, k, it, cfg.Seed)
	if err != nil {
		return nil, err
	}
	// Clarity: distance to the own centre over the distance to the next
	// nearest one. An example between two clusters is ambiguous (a 4 that
	// could be a 9), and teachers disagree on it.
	score := make([]float64, n)
	for i := range score {
		score[i] = dist[i] / math.Max(second[i], 1e-12)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(score[a], score[b]) })
	if cfg.Strategy == Typical {
		return order, nil
	}
	// Balanced: an example's place is its rank in its own cluster's
	// clarity order relative to the cluster's size, so every cluster is
	// asked in turn, in proportion to its size; clearer first among equal
	// places.
	size := make([]int, k)
	for _, c := range assign {
		size[c]++
	}
	place := make([]float64, n)
	seen := make([]int, k)
	for _, i := range order {
		c := assign[i]
		place[i] = (float64(seen[c]) + 0.5) / float64(size[c])
		seen[c]++
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(place[a], place[b]) })
	return order, nil
}

// rows returns the pool's features as float64 rows.
func rows(pool *data.Dataset) [][]float64 {
	out := make([][]float64, pool.Len())
	for i := range out {
		r := pool.Row(i)
		out[i] = make([]float64, len(r))
		for j, v := range r {
			out[i][j] = float64(v)
		}
	}
	return out
}

// project returns the pool's rows projected onto their c leading principal
// components (the eigenvectors of the features' covariance with the
// largest eigenvalues), centred.
func project(ctx context.Context, pool *data.Dataset, c int) ([][]float64, error) {
	n, dim := pool.Len(), pool.Dim()
	if n == 0 || c >= dim {
		return rows(pool), nil
	}
	mean := make([]float64, dim)
	for i := range n {
		for j, v := range pool.Row(i) {
			mean[j] += float64(v)
		}
	}
	for j := range mean {
		mean[j] /= float64(n)
	}
	x := mat.NewDense(n, dim, nil)
	for i := range n {
		for j, v := range pool.Row(i) {
			x.Set(i, j, float64(v)-mean[j])
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var cov mat.SymDense
	cov.SymOuterK(1/float64(n), x.T())
	var eig mat.EigenSym
	if !eig.Factorize(&cov, true) {
		return nil, fmt.Errorf("%w: the features' covariance has no eigendecomposition (non-finite features?)", ErrConfig)
	}
	var vecs mat.Dense
	eig.VectorsTo(&vecs)
	// Eigenvalues come in ascending order: the last c columns lead.
	lead := vecs.Slice(0, dim, dim-c, dim)
	var proj mat.Dense
	proj.Mul(x, lead)
	out := make([][]float64, n)
	for i := range out {
		out[i] = mat.Row(nil, i, &proj)
	}
	return out, nil
}

// kmeans clusters the pool's rows with k-means++ seeding and Lloyd's
// iterations; it returns each row's cluster, its Euclidean distance to the
// cluster's centre and to the next nearest centre.
func kmeans(ctx context.Context, feat [][]float64, k, iterations int, seed uint64) ([]int, []float64, []float64, error) {
	n := len(feat)
	if n == 0 {
		return nil, nil, nil, nil
	}
	dim := len(feat[0])
	r := rand.New(rand.NewPCG(seed, 0x6b6d65616e73))
	cent := make([]float64, k*dim)
	d2 := make([]float64, n)
	setCentre := func(c, i int) {
		copy(cent[c*dim:(c+1)*dim], feat[i])
	}
	sq := func(i, c int) float64 {
		s := 0.0
		for j, v := range feat[i] {
			d := v - cent[c*dim+j]
			s += d * d
		}
		return s
	}
	setCentre(0, r.IntN(n))
	for i := range d2 {
		d2[i] = sq(i, 0)
	}
	for c := 1; c < k; c++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, nil, err
		}
		total := 0.0
		for _, v := range d2 {
			total += v
		}
		pick := n - 1
		if total > 0 {
			u := r.Float64() * total
			for i, v := range d2 {
				if u -= v; u < 0 {
					pick = i
					break
				}
			}
		} else {
			pick = r.IntN(n)
		}
		setCentre(c, pick)
		for i := range d2 {
			d2[i] = min(d2[i], sq(i, c))
		}
	}
	assign := make([]int, n)
	sd2 := make([]float64, n)
	sum := make([]float64, k*dim)
	count := make([]int, k)
	for it := 0; ; it++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, nil, err
		}
		changed := false
		for i := range n {
			best, bd, sd := 0, math.Inf(1), math.Inf(1)
			for c := range k {
				if d := sq(i, c); d < bd {
					best, bd, sd = c, d, bd
				} else if d < sd {
					sd = d
				}
			}
			sd2[i] = sd
			if assign[i] != best || it == 0 {
				changed = changed || assign[i] != best
				assign[i] = best
			}
			d2[i] = bd
		}
		if (!changed && it > 0) || it == iterations {
			break
		}
		clear(sum)
		clear(count)
		for i, c := range assign {
			count[c]++
			for j, v := range feat[i] {
				sum[c*dim+j] += v
			}
		}
		for c := range k {
			if count[c] == 0 {
				continue // an empty cluster keeps its centre
			}
			for j := range dim {
				cent[c*dim+j] = sum[c*dim+j] / float64(count[c])
			}
		}
	}
	dist := make([]float64, n)
	second := make([]float64, n)
	for i, v := range d2 {
		dist[i] = math.Sqrt(v)
		second[i] = math.Sqrt(sd2[i])
	}
	return assign, dist, second, nil
}
