//go:build onnx

package onnx

import (
	"errors"
	"fmt"

	ort "github.com/yalue/onnxruntime_go"
)

// Built reports whether this build can run ONNX models (build tag onnx).
const Built = true

// Runtime is ONNX Runtime, loaded from its shared library. ONNX Runtime
// has one environment per process: a second NewRuntime before Close fails.
type Runtime struct{}

// NewRuntime loads ONNX Runtime from the shared library at lib
// (scripts/fetch-onnxruntime.sh puts one in lib/onnxruntime).
func NewRuntime(lib string) (*Runtime, error) {
	if lib == "" {
		return nil, errors.New("onnx: no ONNX Runtime library given; scripts/fetch-onnxruntime.sh fetches one")
	}
	if ort.IsInitialized() {
		return nil, errors.New("onnx: ONNX Runtime is already loaded in this process; close it first")
	}
	ort.SetSharedLibraryPath(lib)
	if err := ort.InitializeEnvironment(); err != nil {
		return nil, fmt.Errorf("onnx: load ONNX Runtime from %s: %w", lib, err)
	}
	return &Runtime{}, nil
}

// Close unloads the runtime's environment. Close every Session first.
func (*Runtime) Close() error { return ort.DestroyEnvironment() }

// Session is one loaded model that takes [n, features] and returns
// [n, classes] scores.
type Session struct {
	path              string
	features, classes int
	s                 *ort.DynamicAdvancedSession
}

// Open checks the model at path against the federation's features and
// classes (CheckFile) and loads it. Each session runs on one thread; a
// hospital runs its teachers side by side.
func (r *Runtime) Open(path string, features, classes int) (*Session, error) {
	if err := CheckFile(path, features, classes); err != nil {
		return nil, err
	}
	ins, outs, err := ort.GetInputOutputInfo(path)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", path, err)
	}
	if len(ins) != 1 || len(outs) != 1 {
		return nil, fmt.Errorf("%w: %s: ONNX Runtime sees %d inputs and %d outputs, want one of each", ErrInterface, path, len(ins), len(outs))
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	defer opts.Destroy()
	if err := opts.SetIntraOpNumThreads(1); err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	if err := opts.SetInterOpNumThreads(1); err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	s, err := ort.NewDynamicAdvancedSession(path, []string{ins[0].Name}, []string{outs[0].Name}, opts)
	if err != nil {
		return nil, fmt.Errorf("onnx: load %s: %w", path, err)
	}
	return &Session{path: path, features: features, classes: classes, s: s}, nil
}

// Scores runs the model on the rows of x and returns n×classes scores.
func (s *Session) Scores(x []float32) ([]float32, error) {
	if len(x)%s.features != 0 {
		return nil, fmt.Errorf("onnx: %d values is not a whole number of %d-feature rows", len(x), s.features)
	}
	n := len(x) / s.features
	in, err := ort.NewTensor(ort.NewShape(int64(n), int64(s.features)), x)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	defer in.Destroy()
	outs := []ort.Value{nil}
	if err := s.s.Run([]ort.Value{in}, outs); err != nil {
		return nil, fmt.Errorf("onnx: run %s: %w", s.path, err)
	}
	defer outs[0].Destroy()
	t, ok := outs[0].(*ort.Tensor[float32])
	if !ok {
		return nil, fmt.Errorf("%w: %s returned a %T, want float32 scores", ErrInterface, s.path, outs[0])
	}
	if got := t.GetShape(); len(got) != 2 || got[0] != int64(n) || got[1] != int64(s.classes) {
		return nil, fmt.Errorf("%w: %s returned scores of shape %v for %d rows, want [%d, %d]", ErrInterface, s.path, got, n, n, s.classes)
	}
	return append([]float32(nil), t.GetData()...), nil
}

// Close releases the session.
func (s *Session) Close() error { return s.s.Destroy() }
