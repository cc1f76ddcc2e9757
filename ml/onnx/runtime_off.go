//go:build !onnx

package onnx

// Built reports whether this build can run ONNX models (build tag onnx).
const Built = false

// Runtime is ONNX Runtime; this build has none (see ErrNotBuilt).
type Runtime struct{}

// NewRuntime fails with ErrNotBuilt: this build cannot run ONNX models.
func NewRuntime(string) (*Runtime, error) { return nil, ErrNotBuilt }

// Close does nothing: no runtime was loaded.
func (*Runtime) Close() error { return nil }

// Session is a loaded model; this build has none.
type Session struct{}

// Open fails with ErrNotBuilt.
func (*Runtime) Open(string, int, int) (*Session, error) { return nil, ErrNotBuilt }

// Scores fails with ErrNotBuilt.
func (*Session) Scores([]float32) ([]float32, error) { return nil, ErrNotBuilt }

// Close does nothing.
func (*Session) Close() error { return nil }
