package teacher

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Training holds a tenth of the data out and reports how the ensemble does
// on it: on two well-separated classes, nearly always right, and the
// teachers agreeing; on labels that are noise, near chance.
func TestTrainChecksOnHeldOutData(t *testing.T) {
	for _, tc := range []struct {
		name           string
		label          func(i int, x0 float64) int
		minAcc, maxAcc float64
	}{
		{"separable", func(_ int, x0 float64) int {
			if x0 > 0 {
				return 1
			}
			return 0
		}, 0.95, 1},
		// Labels from a hash of the index: nothing to learn. With 100
		// held-out examples, the clean vote's accuracy is Binomial(100, ½)
		// /100; outside [0.25, 0.75] with probability below 1e-6.
		{"noise", func(i int, _ float64) int { return int((uint32(i)*2654435761)>>31) & 1 }, 0.25, 0.75},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var csv strings.Builder
			for i := range 1000 {
				x0 := float64(i%50)/10 - 2.45
				x1 := float64((i*7)%13) / 13
				fmt.Fprintf(&csv, "%g,%g,%d\n", x0, x1, tc.label(i, x0))
			}
			path := filepath.Join(t.TempDir(), "d.csv")
			if err := os.WriteFile(path, []byte(csv.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			var logged strings.Builder
			models := t.TempDir()
			m, err := Train(t.Context(), TrainOptions{Data: path, Teachers: 5, Model: "softmax", Epochs: 20, Seed: 1,
				Models: models, Logger: slog.New(slog.NewJSONHandler(&logged, nil))})
			if err != nil {
				t.Fatal(err)
			}
			c := m.Check
			if c == nil || c.HeldOut != 100 || m.Examples != 1000 {
				t.Fatalf("manifest %+v, check %+v: want 100 of 1000 examples held out", m, c)
			}
			if c.Accuracy < tc.minAcc || c.Accuracy > tc.maxAcc {
				t.Errorf("ensemble accuracy %.3f, want within [%.2f, %.2f]", c.Accuracy, tc.minAcc, tc.maxAcc)
			}
			if c.Agreement < 0.5 || c.Agreement > 1 || c.TeacherAccuracy < 0 || c.TeacherAccuracy > 1 {
				t.Errorf("agreement %.3f, teacher accuracy %.3f out of range", c.Agreement, c.TeacherAccuracy)
			}
			if !strings.Contains(logged.String(), `"ensemble_accuracy"`) {
				t.Errorf("the check was not logged:\n%s", logged.String())
			}
			read, err := ReadManifest(models)
			if err != nil || read.Check == nil || *read.Check != *c {
				t.Fatalf("the manifest on disk holds %+v (%v), want %+v", read, err, c)
			}
		})
	}
	// Too little data to spare a tenth: trained on all, not checked.
	var csv strings.Builder
	for i := range 60 {
		fmt.Fprintf(&csv, "%d,%d\n", i%2, i%2)
	}
	path := filepath.Join(t.TempDir(), "small.csv")
	if err := os.WriteFile(path, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Train(t.Context(), TrainOptions{Data: path, Teachers: 2, Model: "softmax", Epochs: 1, Seed: 1, Models: t.TempDir()})
	if err != nil || m.Check != nil {
		t.Fatalf("small data: check %+v, err %v; want none", m.Check, err)
	}
}
