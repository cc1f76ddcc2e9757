// Package ensemble trains teacher ensembles on disjoint shards, computes
// their vote histograms for a batch of queries, and trains students on the
// labels an aggregator released.
package ensemble

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/nzcfed/nzc/internal/parallel"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/metrics"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/ml/progress"
)

// Config is how a teacher ensemble is trained.
type Config struct {
	Spec  model.Spec
	Train model.TrainConfig // Train.Seed is replaced by a per-teacher seed
	// Seed determines every teacher's initialisation and shuffling:
	// teacher i uses seeds derived from (Seed, i).
	Seed uint64
	// Workers is how many teachers train at once (default: the number of cores).
	Workers int
	// CacheDir, when set, keeps trained teachers on disk keyed by everything
	// that determines them, so a second run loads instead of retraining.
	CacheDir string
	// Progress, when a terminal, shows a progress line (teacher, samples/s, ETA).
	Progress io.Writer
	// Clock for the progress line (time.Now when nil).
	Clock func() time.Time
	// Logger, when set, receives cache hits and misses.
	Logger *slog.Logger
	// ProgressLog, when set and Progress is not a terminal, receives the
	// progress as a structured line every progress.LogEvery.
	ProgressLog *slog.Logger
}

// ErrEnsemble reports an ensemble that cannot be trained as asked.
var ErrEnsemble = errors.New("cannot train the ensemble")

// TeacherSeed derives teacher i's seed from the ensemble seed.
func TeacherSeed(seed uint64, i int) uint64 {
	h := sha256.New()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(i))
	h.Write([]byte("nzc/ml/ensemble.teacher"))
	h.Write(b[:])
	return binary.LittleEndian.Uint64(h.Sum(nil))
}

// cacheFormat changes whenever the meaning of a cache key changes.
const cacheFormat = 1

// teacherKey is everything that determines a trained teacher.
type teacherKey struct {
	Format int               `json:"format"`
	Model  int               `json:"model_format"`
	Data   string            `json:"data"`
	Spec   model.Spec        `json:"spec"`
	Train  model.TrainConfig `json:"train"`
	Seed   uint64            `json:"seed"`
	Shard  string            `json:"shard"`
}

func (k teacherKey) id() string {
	b, err := json.Marshal(k)
	if err != nil {
		panic("ensemble: cache key does not encode: " + err.Error())
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func hashShard(idx []int) string {
	h := sha256.New()
	b := make([]byte, 0, 8*len(idx))
	for _, i := range idx {
		b = binary.LittleEndian.AppendUint64(b, uint64(i))
	}
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// TrainTeachers trains one teacher per shard (shards index train) and
// returns them in shard order. Teachers train in parallel, each
// deterministically from its own seed, so the result does not depend on
// the number of workers.
func TrainTeachers(ctx context.Context, cfg Config, train *data.Dataset, shards [][]int) ([]*model.Network, error) {
	if len(shards) == 0 {
		return nil, fmt.Errorf("%w: no shards", ErrEnsemble)
	}
	if _, err := cfg.Spec.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Train.Validate(); err != nil {
		return nil, err
	}
	for i, s := range shards {
		if len(s) == 0 {
			return nil, fmt.Errorf("%w: shard %d is empty", ErrEnsemble, i)
		}
		for _, j := range s {
			if j < 0 || j >= train.Len() {
				return nil, fmt.Errorf("%w: shard %d refers to example %d of %d", ErrEnsemble, i, j, train.Len())
			}
		}
	}
	if cfg.CacheDir != "" {
		if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
			return nil, fmt.Errorf("teacher cache: %w", err)
		}
	}
	dataHash := ""
	if cfg.CacheDir != "" {
		dataHash = train.Hash()
	}
	total := 0
	for _, s := range shards {
		_, epochs := cfg.Train.Steps(len(s))
		total += epochs * len(s)
	}
	bar := progress.NewOrLog(cfg.Progress, cfg.Clock, cfg.ProgressLog, progress.LogEvery)
	defer bar.Done()
	var (
		done     atomic.Int64
		finished atomic.Int64
	)
	label := func() string {
		return fmt.Sprintf("teachers %d/%d", finished.Load(), len(shards))
	}
	out := make([]*model.Network, len(shards))
	err := parallel.ForEach(ctx, len(shards), cfg.Workers, func(ctx context.Context, i int) error {
		n, err := trainOne(ctx, cfg, train, dataHash, shards[i], i, func(d int) {
			bar.Update(label(), int(done.Add(int64(d))), total, "samples")
		})
		if err != nil {
			return fmt.Errorf("teacher %d: %w", i, err)
		}
		out[i] = n
		finished.Add(1)
		bar.Update(label(), int(done.Load()), total, "samples")
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func trainOne(ctx context.Context, cfg Config, train *data.Dataset, dataHash string, shard []int, i int, advance func(int)) (*model.Network, error) {
	seed := TeacherSeed(cfg.Seed, i)
	tc := cfg.Train
	tc.Seed = seed ^ 0x5eed
	_, epochs := tc.Steps(len(shard))
	var path string
	if cfg.CacheDir != "" {
		key := teacherKey{Format: cacheFormat, Model: model.FormatVersion, Data: dataHash, Spec: cfg.Spec, Train: tc, Seed: seed, Shard: hashShard(shard)}
		path = filepath.Join(cfg.CacheDir, key.id()+".nzcm")
		if n, err := model.Load(path); err == nil {
			if cfg.Logger != nil {
				cfg.Logger.Debug("teacher loaded from cache", "teacher", i, "path", path)
			}
			advance(epochs * len(shard))
			return n, nil
		} else if !errors.Is(err, os.ErrNotExist) && cfg.Logger != nil {
			cfg.Logger.Warn("cached teacher unreadable; retraining", "path", path, "err", err)
		}
	}
	n, err := model.New(cfg.Spec, seed)
	if err != nil {
		return nil, err
	}
	last := 0
	if _, err := n.Train(ctx, train.Subset(shard), tc, func(d, _ int) {
		advance(d - last)
		last = d
	}); err != nil {
		return nil, err
	}
	if path != "" {
		if err := n.Save(path); err != nil {
			return nil, fmt.Errorf("teacher cache: %w", err)
		}
	}
	// A trained network keeps its last minibatch's activations and
	// gradients; a clone holds the weights only, which is what an ensemble
	// of hundreds of teachers should keep in memory.
	return n.Clone(), nil
}

// Predictions returns each teacher's predicted class for each query:
// out[t][q]. Teachers are spread over the cores; each runs its queries in
// large batches (one GEMM per layer per batch). The teachers themselves are
// left as they were (no scratch memory grows in them).
func Predictions(ctx context.Context, teachers []*model.Network, x []float32) ([][]int, error) {
	out := make([][]int, len(teachers))
	err := parallel.ForEach(ctx, len(teachers), 0, func(_ context.Context, t int) error {
		// A reader's inference buffers (the unrolled input of every
		// convolution, for batches of up to 256 examples) are dropped with
		// it: kept by every teacher of a large ensemble, they would take
		// gigabytes. It shares the teacher's weights, copying none.
		var err error
		out[t], err = teachers[t].Reader().Predict(x)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Histograms turns predictions (out[t][q] as from Predictions) into vote
// histograms: h[q][c] is the number of teachers that voted for class c on
// query q.
func Histograms(preds [][]int, queries, classes int) ([][]int, error) {
	h := make([][]int, queries)
	flat := make([]int, queries*classes)
	for q := range h {
		h[q] = flat[q*classes : (q+1)*classes : (q+1)*classes]
	}
	for t, p := range preds {
		if len(p) != queries {
			return nil, fmt.Errorf("%w: teacher %d made %d predictions for %d queries", ErrEnsemble, t, len(p), queries)
		}
		for q, c := range p {
			if c < 0 || c >= classes {
				return nil, fmt.Errorf("%w: teacher %d voted for class %d of %d", ErrEnsemble, t, c, classes)
			}
			h[q][c]++
		}
	}
	return h, nil
}

// Votes is the vote histogram of the ensemble for each query in x.
func Votes(ctx context.Context, teachers []*model.Network, x []float32, classes int) ([][]int, error) {
	if len(teachers) == 0 {
		return nil, fmt.Errorf("%w: no teachers", ErrEnsemble)
	}
	preds, err := Predictions(ctx, teachers, x)
	if err != nil {
		return nil, err
	}
	return Histograms(preds, len(preds[0]), classes)
}

// Plurality is the clean (noiseless) vote: the most voted class of each
// histogram, ties to the lowest class.
func Plurality(h [][]int) []int {
	out := make([]int, len(h))
	for q, row := range h {
		best := 0
		for c, v := range row {
			if v > row[best] {
				best = c
			}
		}
		out[q] = best
	}
	return out
}

// TopTwoGap is, per histogram, the difference between the largest and
// second-largest vote counts.
func TopTwoGap(h [][]int) []int {
	out := make([]int, len(h))
	for q, row := range h {
		a, b := -1, -1
		for _, v := range row {
			switch {
			case v > a:
				a, b = v, a
			case v > b:
				b = v
			}
		}
		if b < 0 {
			b = 0
		}
		out[q] = a - b
	}
	return out
}

// ErrNoLabels reports a student with nothing to learn from.
var ErrNoLabels = errors.New("no answered queries to train the student on")

// TrainStudent trains a fresh network on the queries whose label was
// released (labels[i] ≥ 0); refusals (metrics.Refused) are skipped. It
// returns the network and the number of examples it was trained on.
func TrainStudent(ctx context.Context, spec model.Spec, cfg model.TrainConfig, seed uint64, queries *data.Dataset, labels []int, prog model.Progress) (*model.Network, int, error) {
	if len(labels) != queries.Len() {
		return nil, 0, fmt.Errorf("%w: %d labels for %d queries", ErrEnsemble, len(labels), queries.Len())
	}
	var idx []int
	for i, l := range labels {
		if l == metrics.Refused {
			continue
		}
		if l < 0 || l >= spec.Classes {
			return nil, 0, fmt.Errorf("%w: label %d of query %d is not a class", ErrEnsemble, l, i)
		}
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return nil, 0, ErrNoLabels
	}
	train := queries.Subset(idx)
	for j, i := range idx {
		train.Y[j] = labels[i]
	}
	n, err := model.New(spec, seed)
	if err != nil {
		return nil, 0, err
	}
	if _, err := n.Train(ctx, train, cfg, prog); err != nil {
		return nil, 0, err
	}
	return n, len(idx), nil
}
