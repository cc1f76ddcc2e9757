package teacher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/ml/onnx"
)

// ONNXManifestFile, in a models directory, names ONNX teachers instead of
// the Go ensemble: the federation's features and classes and one model
// file per teacher, each trained on its own disjoint shard.
const ONNXManifestFile = "onnx.json"

// ONNXManifest is the content of onnx.json.
type ONNXManifest struct {
	Features int      `json:"features"`
	Classes  int      `json:"classes"`
	Models   []string `json:"models"`
}

// ONNXEnsemble is a hospital's teachers brought as ONNX models, run by
// ONNX Runtime (a build with the onnx tag). Each model takes the
// federation's feature rows, [batch, features], and returns [batch,
// classes] scores; a teacher votes for its highest score.
type ONNXEnsemble struct {
	m        ONNXManifest
	rt       *onnx.Runtime
	sessions []*onnx.Session
}

// LoadONNXEnsemble loads the ONNX teachers of dir with the ONNX Runtime
// library lib. Every model's declared input and output are checked against
// the manifest's features and classes before any is run; an error names the
// file and what differs.
func LoadONNXEnsemble(dir, lib string) (*ONNXEnsemble, error) {
	path := filepath.Join(dir, ONNXManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w in %s: %v", ErrNoEnsemble, dir, err)
	}
	var m ONNXManifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w (want {\"features\": N, \"classes\": K, \"models\": [\"teacher-1.onnx\", …]})", path, err)
	}
	switch {
	case m.Features < 1:
		return nil, fmt.Errorf("%s: features %d, want the number of values in one query row", path, m.Features)
	case m.Classes < 2:
		return nil, fmt.Errorf("%s: classes %d, want at least 2", path, m.Classes)
	case len(m.Models) == 0:
		return nil, fmt.Errorf("%s: no models listed", path)
	}
	for _, f := range m.Models {
		if filepath.Base(f) != f || f == "." || f == ".." {
			return nil, fmt.Errorf("%s: model %q is not a file name in %s", path, f, dir)
		}
		// Check every interface first: a bad model is named before any
		// runtime is loaded.
		if err := onnx.CheckFile(filepath.Join(dir, f), m.Features, m.Classes); err != nil {
			return nil, err
		}
	}
	rt, err := onnx.NewRuntime(lib)
	if err != nil {
		return nil, err
	}
	e := &ONNXEnsemble{m: m, rt: rt}
	for _, f := range m.Models {
		s, err := rt.Open(filepath.Join(dir, f), m.Features, m.Classes)
		if err != nil {
			return nil, errors.Join(err, e.Close())
		}
		e.sessions = append(e.sessions, s)
	}
	return e, nil
}

// Teachers is the number of teachers.
func (e *ONNXEnsemble) Teachers() int { return len(e.sessions) }

// Classes is the number of classes they vote on.
func (e *ONNXEnsemble) Classes() int { return e.m.Classes }

// Dim is the number of features of a query.
func (e *ONNXEnsemble) Dim() int { return e.m.Features }

// Votes returns the vote histogram of each query in x.
func (e *ONNXEnsemble) Votes(ctx context.Context, x []float32) ([][]int, error) {
	if len(x)%e.m.Features != 0 {
		return nil, fmt.Errorf("teacher: %d values is not a whole number of %d-feature queries", len(x), e.m.Features)
	}
	n := len(x) / e.m.Features
	preds := make([][]int, len(e.sessions))
	for t, s := range e.sessions {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		scores, err := s.Scores(x)
		if err != nil {
			return nil, err
		}
		preds[t] = make([]int, n)
		for q := range n {
			preds[t][q] = model.Argmax(scores[q*e.m.Classes : (q+1)*e.m.Classes])
		}
	}
	return ensemble.Histograms(preds, n, e.m.Classes)
}

// Close releases the models and the runtime.
func (e *ONNXEnsemble) Close() error {
	var errs []error
	for _, s := range e.sessions {
		errs = append(errs, s.Close())
	}
	e.sessions = nil
	return errors.Join(append(errs, e.rt.Close())...)
}

// LoadVoter loads the teachers of a models directory: the ONNX teachers
// its onnx.json names (run with the ONNX Runtime library lib), or else the
// Go ensemble nzc-teacher train wrote. Close releases them.
func LoadVoter(dir, lib string) (Voter, io.Closer, error) {
	if _, err := os.Stat(filepath.Join(dir, ONNXManifestFile)); err == nil {
		e, err := LoadONNXEnsemble(dir, lib)
		if err != nil {
			return nil, nil, err
		}
		return e, e, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	e, err := LoadEnsemble(dir)
	if err != nil {
		return nil, nil, err
	}
	return e, goEnsemble{}, nil
}

// goEnsemble holds nothing to release: Go models are plain memory.
type goEnsemble struct{}

func (goEnsemble) Close() error { return nil }

// ExportONNX writes the Go ensemble of dir (nzc-teacher train) to out as
// ONNX teachers, one model per teacher, with their onnx.json: the same
// teachers, run by ONNX Runtime. out must not hold an onnx.json yet.
func ExportONNX(dir, out string) (*ONNXManifest, error) {
	e, err := LoadEnsemble(dir)
	if err != nil {
		return nil, err
	}
	manifest := filepath.Join(out, ONNXManifestFile)
	if _, err := os.Lstat(manifest); err == nil {
		return nil, fmt.Errorf("%s exists: export into a new directory", manifest)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("ONNX models directory: %w", err)
	}
	m := &ONNXManifest{Features: e.Dim(), Classes: e.Classes()}
	for i, net := range e.nets {
		b, err := onnx.Export(net)
		if err != nil {
			return nil, fmt.Errorf("teacher %d: %w", i, err)
		}
		name := fmt.Sprintf("teacher-%04d.onnx", i)
		if err := model.WriteFileAtomic(filepath.Join(out, name), b); err != nil {
			return nil, err
		}
		m.Models = append(m.Models, name)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	// The manifest last: a directory without one holds no complete ensemble.
	return m, model.WriteFileAtomic(manifest, append(b, '\n'))
}
