package ensemble

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/data/synth"
	"github.com/nzcfed/nzc/ml/metrics"
	"github.com/nzcfed/nzc/ml/model"
)

// blobs makes a 3-class problem of Gaussian clusters in 6 dimensions.
func blobs(seed uint64, n int) *data.Dataset {
	return synth.Blobs{Classes: 3, Dim: 6, Spread: 2, CentreSeed: [2]uint64{42, 1}}.Make(seed, n)
}

func testConfig() Config {
	return Config{
		Spec:  model.Spec{Kind: model.KindMLP, Input: data.Shape{Height: 1, Width: 6, Channels: 1}, Classes: 3, Hidden: []int{8}},
		Train: model.TrainConfig{Optimizer: model.Adam, LearnRate: 0.01, BatchSize: 16, Epochs: 5, MinSteps: 30},
		Seed:  7,
	}
}

func encodeAll(t *testing.T, ns []*model.Network) [][]byte {
	t.Helper()
	var out [][]byte
	for _, n := range ns {
		b, err := n.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func TestTrainTeachersDeterministicAndCached(t *testing.T) {
	ctx := context.Background()
	train := blobs(1, 600)
	parts, err := data.Partition(train.Len(), []int{3, 2}, 1)
	if err != nil {
		t.Fatal(err)
	}
	shards := append(parts[0], parts[1]...)
	cfg := testConfig()
	cfg.Workers = 1
	one, err := TrainTeachers(ctx, cfg, train, shards)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Workers = 2
	cfg.CacheDir = t.TempDir()
	two, err := TrainTeachers(ctx, cfg, train, shards)
	if err != nil {
		t.Fatal(err)
	}
	a, b := encodeAll(t, one), encodeAll(t, two)
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("teacher %d differs between 1 and 2 workers", i)
		}
		if i > 0 && bytes.Equal(a[i], a[i-1]) {
			t.Fatalf("teachers %d and %d are identical", i-1, i)
		}
	}
	files, _ := os.ReadDir(cfg.CacheDir)
	if len(files) != len(shards) {
		t.Fatalf("%d cache files, want %d", len(files), len(shards))
	}
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	three, err := TrainTeachers(ctx, cfg, train, shards)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(logs.String(), "loaded from cache"); got != len(shards) {
		t.Fatalf("%d teachers loaded from cache, want %d", got, len(shards))
	}
	for i, c := range encodeAll(t, three) {
		if !bytes.Equal(c, a[i]) {
			t.Fatalf("cached teacher %d differs", i)
		}
	}
	// A different seed misses the cache.
	logs.Reset()
	cfg.Seed++
	if _, err := TrainTeachers(ctx, cfg, train, shards); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "loaded from cache") {
		t.Fatal("a different seed hit the cache")
	}
}

func TestVotesAndStudent(t *testing.T) {
	ctx := context.Background()
	train, queries := blobs(1, 900), blobs(2, 300)
	parts, _ := data.Partition(train.Len(), []int{9}, 3)
	teachers, err := TrainTeachers(ctx, testConfig(), train, parts[0])
	if err != nil {
		t.Fatal(err)
	}
	h, err := Votes(ctx, teachers, queries.X, 3)
	if err != nil {
		t.Fatal(err)
	}
	for q, row := range h {
		s := 0
		for _, v := range row {
			s += v
		}
		if s != len(teachers) {
			t.Fatalf("query %d: %d votes, want %d", q, s, len(teachers))
		}
	}
	clean := Plurality(h)
	acc, _ := metrics.Accuracy(clean, queries.Y)
	if acc < 0.9 {
		t.Fatalf("ensemble accuracy %.3f, want ≥ 0.9", acc)
	}
	// Refuse every other query; the student learns from the rest.
	labels := slices.Clone(clean)
	for i := range labels {
		if i%2 == 1 {
			labels[i] = metrics.Refused
		}
	}
	cfg := testConfig()
	st, used, err := TrainStudent(ctx, cfg.Spec, cfg.Train, 1, queries, labels, nil)
	if err != nil {
		t.Fatal(err)
	}
	if used != (queries.Len()+1)/2 {
		t.Fatalf("student used %d examples, want %d", used, (queries.Len()+1)/2)
	}
	if acc, _ := st.Accuracy(blobs(3, 300)); acc < 0.9 {
		t.Fatalf("student accuracy %.3f, want ≥ 0.9", acc)
	}
	all := make([]int, queries.Len())
	for i := range all {
		all[i] = metrics.Refused
	}
	if _, _, err := TrainStudent(ctx, cfg.Spec, cfg.Train, 1, queries, all, nil); !errors.Is(err, ErrNoLabels) {
		t.Fatalf("all refused: %v, want ErrNoLabels", err)
	}
}

func TestHistogramHelpers(t *testing.T) {
	h, err := Histograms([][]int{{0, 1, 2}, {0, 2, 2}, {1, 2, 2}}, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int{{2, 1, 0}, {0, 1, 2}, {0, 0, 3}}
	for q := range want {
		if !slices.Equal(h[q], want[q]) {
			t.Fatalf("histograms %v, want %v", h, want)
		}
	}
	if p := Plurality(h); !slices.Equal(p, []int{0, 2, 2}) {
		t.Fatalf("plurality %v", p)
	}
	if g := TopTwoGap(h); !slices.Equal(g, []int{1, 1, 3}) {
		t.Fatalf("gaps %v", g)
	}
	if _, err := Histograms([][]int{{0, 5}}, 2, 3); !errors.Is(err, ErrEnsemble) {
		t.Fatalf("bad class: %v", err)
	}
}
