package main

import (
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/cmd/internal/clitest"
)

// writeIDX writes a uint8 idx file.
func writeIDX(t *testing.T, path string, dims []int, vals []byte) {
	t.Helper()
	b := []byte{0, 0, 0x08, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(d))
	}
	if err := os.WriteFile(path, append(b, vals...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// syntheticIDX writes a small 3-class image data set: class c lights up
// row band c of an 6×6 image, with noise.
func syntheticIDX(t *testing.T, dir string) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	mk := func(n int) ([]byte, []byte) {
		img, lab := make([]byte, n*36), make([]byte, n)
		for i := range n {
			c := r.IntN(3)
			lab[i] = byte(c)
			for p := range 36 {
				v := r.IntN(90)
				if p/6/2 == c {
					v += 150
				}
				img[i*36+p] = byte(v)
			}
		}
		return img, lab
	}
	img, lab := mk(600)
	writeIDX(t, filepath.Join(dir, "train-images-idx3-ubyte"), []int{600, 6, 6}, img)
	writeIDX(t, filepath.Join(dir, "train-labels-idx1-ubyte"), []int{600}, lab)
	img, lab = mk(300)
	writeIDX(t, filepath.Join(dir, "t10k-images-idx3-ubyte"), []int{300, 6, 6}, img)
	writeIDX(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), []int{300}, lab)
}

func TestExperimentCommand(t *testing.T) {
	dataDir, out := t.TempDir(), t.TempDir()
	syntheticIDX(t, dataDir)
	stdout, stderr, err := clitest.ExecuteSplit(t, newRootCommand(), "experiment", "--preset", "quick", "--data-dir", dataDir, "--out", out,
		"--cache-dir", filepath.Join(out, "cache"), "--teachers", "10", "--tuning-train", "200", "--tuning-pool", "100", "--queries", "50,150", "--holdout", "100",
		"--model", "softmax", "--student-model", "softmax", "--format", "json")
	if err != nil {
		t.Fatalf("experiment: %v\n%s", err, stderr)
	}
	var rep struct {
		Dataset      string `json:"dataset"`
		Teachers     int    `json:"teachers"`
		TeacherTrain *struct {
			MinSteps int `json:"min_steps"`
		} `json:"teacher_train"`
		Rows []struct {
			Aggregator string `json:"aggregator"`
			Epsilon    any    `json:"epsilon"`
		} `json:"rows"`
		Tuning *struct {
			Diagnostics []json.RawMessage `json:"diagnostics"`
		} `json:"tuning"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	// lnmax, gnmax and confident-gnmax at both query counts, nzc and
	// nzc-svt at the larger, nzc-svt again in the data's own order and the
	// ground truth; the tuning share's ensemble only as a diagnostic.
	if rep.Teachers != 10 || len(rep.Rows) != 6+2+1+1 || rep.Tuning == nil || len(rep.Tuning.Diagnostics) != 1 {
		t.Fatalf("unexpected report: %+v", rep)
	}
	// The quick preset's teachers train for at least 40 steps.
	if rep.TeacherTrain == nil || rep.TeacherTrain.MinSteps != 40 {
		t.Errorf("the report records the teachers' training as %+v, want the quick preset's (40 steps)", rep.TeacherTrain)
	}
	for _, f := range []string{"results.json", "results.md", "student-accuracy-vs-epsilon.png", "vote-gaps.png", "ensemble-accuracy.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, "results.md"))
	if strings.Contains(string(md), "| clean votes |") || !strings.Contains(string(md), "| ground truth |") || !strings.Contains(string(md), "Tuning share: training examples 401–500") {
		t.Errorf("results.md has a clean-votes row, or lacks the ground truth or the tuning share:\n%s", md)
	}

	// Re-rendering from results.json reproduces results.md.
	again := t.TempDir()
	if _, err := clitest.Execute(t, newRootCommand(), "experiment", "--from", filepath.Join(out, "results.json"), "--out", again); err != nil {
		t.Fatalf("--from: %v", err)
	}
	md2, _ := os.ReadFile(filepath.Join(again, "results.md"))
	if string(md2) != string(md) {
		t.Errorf("re-rendered results.md differs:\n%s\nvs\n%s", md2, md)
	}
}

func TestExperimentCommandErrors(t *testing.T) {
	for _, args := range [][]string{
		{"experiment", "--preset", "nope"},
		{"experiment", "--preset", "quick", "--data-dir", t.TempDir()},
		{"experiment", "--preset", "quick", "--teachers", "x"},
	} {
		if _, err := clitest.Execute(t, newRootCommand(), args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// A student setting out of range, or one the preset does not use, is
// refused before anything is trained, naming the flag.
func TestExperimentStudentFlagErrors(t *testing.T) {
	dataDir := t.TempDir()
	syntheticIDX(t, dataDir)
	for _, c := range []struct {
		args []string
		want string
	}{
		// The quick preset self-trains: a strong view has nothing to set.
		{[]string{"--consistency-rotate", "10"}, "--consistency on"},
		{[]string{"--consistency", "on", "--consistency-rotate", "200"}, "rotation 200"},
		{[]string{"--student-learn-rate", "-0.5"}, "learning rate -0.5"},
		{[]string{"--bootstrap-model", "huge-cnn"}, "huge-cnn"},
		{[]string{"--confident-rotate", "90"}, "rotation 90"},
		{[]string{"--confident-floor", "1"}, "floor 1"},
		{[]string{"--student-rotate", "200"}, "rotation 200"},
		{[]string{"--consistency-epochs", "20"}, "--consistency on"},
		{[]string{"--consistency", "on", "--consistency-epochs", "0"}, "0 consistency epochs"},
		{[]string{"--confident-spread", "-3"}, "spread -3"},
		{[]string{"--test-examples", "-1"}, "--test-examples -1"},
		{[]string{"--session-epsilons", "1,x"}, `"x" is not a positive ε`},
		{[]string{"--session-epsilons", "0"}, `"0" is not a positive ε`},
		// Ten teachers allow distances up to 5: no session of ε 1 answers.
		{[]string{"--aggregators", "nzc-svt", "--bootstrap", "5", "--session-epsilons", "1"}, "session ε 1"},
		{[]string{"--test-examples", "301"}, "has 300 test examples"},
		// The first 140 test examples leave 40 queries besides the 100
		// held out: the 50 asked for are more than there are.
		{[]string{"--test-examples", "140"}, "only 40 student examples"},
		{[]string{"--dataset", "cifar"}, `unknown data set "cifar"`},
		// mnist-hard erases 14×14 squares: these images are 6×6.
		{[]string{"--dataset", "mnist-hard"}, "erased square of 14 pixels"},
		{[]string{"--plan-cap", "1", "--plan-session-epsilon", "0.5", "--plan-refusals", "-2"}, "-2 refusals"},
		{[]string{"--plan-cap", "1", "--plan-session-epsilon", "0.5", "--plan-agreement", "2"}, "agreement 2"},
	} {
		out := t.TempDir()
		_, err := clitest.Execute(t, newRootCommand(), append([]string{"experiment", "--preset", "quick", "--data-dir", dataDir, "--out", out, "--cache-dir", "",
			"--teachers", "10", "--tuning-train", "0", "--queries", "50", "--holdout", "100", "--model", "softmax", "--student-model", "softmax"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %q", c.args, err, c.want)
		}
		if _, serr := os.Stat(filepath.Join(out, "results.json")); serr == nil {
			t.Errorf("%v: results written despite the error", c.args)
		}
	}
}

// The students' flags reach the run, and the report records them.
func TestExperimentStudentFlags(t *testing.T) {
	dataDir, out := t.TempDir(), t.TempDir()
	syntheticIDX(t, dataDir)
	stdout, stderr, err := clitest.ExecuteSplit(t, newRootCommand(), "experiment", "--preset", "quick", "--data-dir", dataDir, "--out", out,
		"--cache-dir", "", "--teachers", "10", "--tuning-train", "0", "--queries", "50", "--holdout", "100", "--aggregators", "gnmax",
		"--model", "softmax", "--student-model", "softmax", "--consistency", "on",
		"--consistency-rotate", "7", "--consistency-scale", "0.15", "--consistency-cutout", "3", "--student-learn-rate", "0.004",
		"--student-rotate", "10", "--student-scale", "0.1", "--student-epochs", "12", "--student-views", "2", "--format", "json")
	if err != nil {
		t.Fatalf("experiment: %v\n%s", err, stderr)
	}
	var rep struct {
		StudentViews *struct {
			Shift         int
			Rotate, Scale float64
		} `json:"student_views"`
		StudentTrain struct {
			Epochs    int     `json:"epochs"`
			LearnRate float64 `json:"learn_rate"`
			Shift     int     `json:"shift"`
			Augment   struct {
				Rotate, Scale, Shift float64
			} `json:"augment"`
		} `json:"student_train"`
		StudentConsistency struct {
			Strong struct {
				Rotate, Scale float64
				Cutout        int
			} `json:"strong"`
		} `json:"student_consistency"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	st := rep.StudentConsistency.Strong
	if rep.StudentTrain.LearnRate != 0.004 || st.Rotate != 7 || st.Scale != 0.15 || st.Cutout != 3 {
		t.Fatalf("the report records step %v and strong view %+v, want 0.004 and {7 0.15 3}", rep.StudentTrain.LearnRate, st)
	}
	if rep.StudentTrain.Epochs != 12 {
		t.Fatalf("the report records %d passes over the labels, want 12", rep.StudentTrain.Epochs)
	}
	if v := rep.StudentViews; v == nil || v.Shift != 2 || v.Rotate != 0 || v.Scale != 0 {
		t.Fatalf("the report records views %+v, want moves of 2 pixels and no other copies", v)
	}
	// The quick preset's students are not moved: the distortion starts from no shift.
	if a := rep.StudentTrain.Augment; a.Rotate != 10 || a.Scale != 0.1 || a.Shift != 0 || rep.StudentTrain.Shift != 0 {
		t.Fatalf("the report records the students' distortion %+v and shift %d, want turns of 10°, ±10 %%, no shift", a, rep.StudentTrain.Shift)
	}
}

// Releases draw from crypto/rand five times by default; --seeded-noise and
// --draws change that, and results.json says which.
func TestExperimentNoiseFlags(t *testing.T) {
	dataDir := t.TempDir()
	syntheticIDX(t, dataDir)
	for _, c := range []struct {
		args  []string
		env   map[string]string
		noise string
		draws int
	}{
		{nil, nil, "crypto/rand", 5},
		{[]string{"--seeded-noise", "--draws", "2"}, nil, "seeded:1", 2},
		{[]string{"--seeded-noise", "--seed", "7", "--draws", "1"}, nil, "seeded:7", 1},
		// The options bind NZC_* variables as the services' do; a flag
		// wins over its variable.
		{nil, map[string]string{"NZC_SEEDED_NOISE": "true", "NZC_DRAWS": "3"}, "seeded:1", 3},
		{[]string{"--draws", "1"}, map[string]string{"NZC_DRAWS": "3"}, "crypto/rand", 1},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		stdout, stderr, err := clitest.ExecuteSplit(t, newRootCommand(), append([]string{"experiment", "--preset", "quick", "--data-dir", dataDir, "--out", t.TempDir(),
			"--cache-dir", "", "--teachers", "10", "--tuning-train", "0", "--queries", "50", "--holdout", "100", "--aggregators", "gnmax",
			"--model", "softmax", "--student-model", "softmax", "--format", "json"}, c.args...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, stderr)
		}
		var rep struct {
			Noise string `json:"noise"`
			Rows  []struct {
				Aggregator string            `json:"aggregator"`
				Noise      string            `json:"noise"`
				Draws      []json.RawMessage `json:"draws"`
			} `json:"rows"`
		}
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Noise != c.noise || rep.Rows[0].Aggregator != "gnmax" || rep.Rows[0].Noise != c.noise || len(rep.Rows[0].Draws) != c.draws {
			t.Fatalf("%v: noise %q, first row %+v; want %s and %d draws", c.args, rep.Noise, rep.Rows[0], c.noise, c.draws)
		}
		for k := range c.env {
			os.Unsetenv(k)
		}
	}
	if _, err := clitest.Execute(t, newRootCommand(), "experiment", "--preset", "quick", "--data-dir", dataDir, "--out", t.TempDir(), "--holdout", "100", "--queries", "50", "--tuning-train", "0", "--draws", "0"); err == nil || !strings.Contains(err.Error(), "0 draws") {
		t.Fatalf("--draws 0: %v, want an error naming the draws", err)
	}
}
