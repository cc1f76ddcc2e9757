//go:build onnx

package pytorch

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/onnx/onnxtest"
	"github.com/nzcfed/nzc/party/teacher"
)

// python returns a Python that imports torch: $NZC_PYTHON, python3 on the
// PATH, or Debian's /usr/bin/python3 (where python3-torch installs torch
// when another python3 comes first on the PATH). Without one it skips, or
// fails with NZC_REQUIRE_TORCH set.
func python(t *testing.T) string {
	t.Helper()
	candidates := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv("NZC_PYTHON"); p != "" {
		candidates = []string{p}
	}
	var tried []string
	for _, c := range candidates {
		py, err := exec.LookPath(c)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		out, err := exec.Command(py, "-c", "import torch").CombinedOutput()
		if err == nil {
			return py
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		tried = append(tried, fmt.Sprintf("%s: %s", py, lines[len(lines)-1]))
	}
	msg := "no Python here imports PyTorch (" + strings.Join(tried, "; ") + ")"
	if os.Getenv("NZC_REQUIRE_TORCH") != "" {
		t.Fatalf("NZC_REQUIRE_TORCH is set but %s", msg)
	}
	t.Skipf("%s, so the PyTorch example is not run (Debian: apt-get install python3-torch; NZC_REQUIRE_TORCH=1 makes this a failure)", msg)
	return ""
}

// writeCSV writes rows of 4 features (the class's near 1, the others near
// 0, or uniform when random) and their classes.
func writeCSV(t *testing.T, path string, n int, random bool, r *rand.Rand) [][]float32 {
	t.Helper()
	var b strings.Builder
	b.WriteString("f0,f1,f2,f3,label\n")
	var rows [][]float32
	for i := range n {
		c := i % 4
		row := make([]float32, 4)
		for f := range row {
			row[f] = 0.1 * r.Float32()
			if random {
				row[f] = r.Float32()
			} else if f == c {
				row[f] += 0.9
			}
			fmt.Fprintf(&b, "%g,", row[f])
		}
		fmt.Fprintf(&b, "%d\n", c)
		rows = append(rows, row)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestONNXTeachersVoteAsPyTorch trains teachers with train_teachers.py,
// loads the ONNX models it exports as a hospital does, and checks that
// their vote histograms on fresh rows are those of the same models'
// predictions in PyTorch.
func TestONNXTeachersVoteAsPyTorch(t *testing.T) {
	lib := onnxtest.Library(t)
	py := python(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(5, 5))
	train, query := filepath.Join(dir, "train.csv"), filepath.Join(dir, "query.csv")
	writeCSV(t, train, 240, false, r)
	rows := writeCSV(t, query, 64, true, r)
	models, votes := filepath.Join(dir, "onnx"), filepath.Join(dir, "votes.json")
	cmd := exec.Command(py, "train_teachers.py", "--data", train, "--teachers", "3", "--epochs", "150",
		"--out", models, "--query", query, "--votes", votes)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("train_teachers.py: %v\n%s", err, out)
	} else {
		t.Logf("train_teachers.py:\n%s", out)
	}
	v, closer, err := teacher.LoadVoter(models, lib)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if _, ok := v.(*teacher.ONNXEnsemble); !ok || v.Teachers() != 3 || v.Dim() != 4 || v.Classes() != 4 {
		t.Fatalf("loaded %T: %d teachers, %d features, %d classes", v, v.Teachers(), v.Dim(), v.Classes())
	}
	var x []float32
	for _, row := range rows {
		x = append(x, row...)
	}
	got, err := v.Votes(t.Context(), x)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(votes)
	if err != nil {
		t.Fatal(err)
	}
	var preds [][]int
	if err := json.Unmarshal(b, &preds); err != nil {
		t.Fatal(err)
	}
	want, err := ensemble.Histograms(preds, len(rows), 4)
	if err != nil {
		t.Fatal(err)
	}
	split := onnxtest.SameVotes(t, got, want, 3, "PyTorch")
	t.Logf("%d rows, %d of them splitting the teachers: ONNX Runtime's votes are PyTorch's", len(rows), split)
}
