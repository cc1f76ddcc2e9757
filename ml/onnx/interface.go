package onnx

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrInterface is matched (errors.Is) when a model's declared input or
// output does not fit the federation's features and classes, or cannot be
// read.
var ErrInterface = errors.New("the ONNX model does not fit the federation")

// ErrNotBuilt is returned by NewRuntime in a build without the onnx tag.
var ErrNotBuilt = errors.New("onnx: this binary was built without ONNX Runtime support; build it with `go build -tags onnx` (cgo) and fetch the library with scripts/fetch-onnxruntime.sh")

// maxModelFile bounds a model file read whole.
const maxModelFile = 1 << 30

// Dim is one dimension of a declared shape: a fixed size, or a named
// (symbolic) one such as the batch, or neither (unknown).
type Dim struct {
	Value int64
	Param string
}

func (d Dim) String() string {
	switch {
	case d.Param != "":
		return d.Param
	case d.Value > 0:
		return strconv.FormatInt(d.Value, 10)
	}
	return "?"
}

// Value is a declared graph input or output.
type Value struct {
	Name     string
	ElemType int32 // TensorProto.DataType; 1 is float32
	Shape    []Dim // nil when the model declares no shape
}

func (v Value) shape() string {
	if v.Shape == nil {
		return "no declared shape"
	}
	s := make([]string, len(v.Shape))
	for i, d := range v.Shape {
		s[i] = d.String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// Interface is what a model declares it takes and returns. Inputs that are
// initializers (weights, in models of IR version 3 and earlier) are left
// out.
type Interface struct {
	Inputs, Outputs []Value
}

// ReadInterface reads the declared inputs and outputs of an ONNX model.
func ReadInterface(model []byte) (Interface, error) {
	var (
		graph []byte
		found bool
	)
	err := fields(model, func(num protowire.Number, v []byte) error {
		if num == modelGraph {
			graph, found = v, true
		}
		return nil
	})
	if err != nil {
		return Interface{}, err
	}
	if !found {
		return Interface{}, errors.New("no graph: not an ONNX model")
	}
	var (
		it      Interface
		inits   []string
		inputs  []Value
		outputs []Value
	)
	err = fields(graph, func(num protowire.Number, v []byte) error {
		switch num {
		case graphInitializer:
			return fields(v, func(n protowire.Number, b []byte) error {
				if n == tensorName {
					inits = append(inits, string(b))
				}
				return nil
			})
		case graphInput, graphOutput:
			val, err := readValue(v)
			if err != nil {
				return err
			}
			if num == graphInput {
				inputs = append(inputs, val)
			} else {
				outputs = append(outputs, val)
			}
		}
		return nil
	})
	if err != nil {
		return Interface{}, err
	}
	for _, in := range inputs {
		if !slices.Contains(inits, in.Name) {
			it.Inputs = append(it.Inputs, in)
		}
	}
	it.Outputs = outputs
	return it, nil
}

func readValue(b []byte) (Value, error) {
	var v Value
	err := fields(b, func(num protowire.Number, f []byte) error {
		switch num {
		case valueName:
			v.Name = string(f)
		case valueType:
			return fields(f, func(n protowire.Number, t []byte) error {
				if n != typeTensor {
					return nil
				}
				return fields(t, func(n protowire.Number, tt []byte) error {
					switch n {
					case tensorElemType:
						x, k := protowire.ConsumeVarint(tt)
						if k < 0 {
							return protowire.ParseError(k)
						}
						v.ElemType = int32(x)
					case tensorShape:
						v.Shape = []Dim{}
						return fields(tt, func(n protowire.Number, d []byte) error {
							if n != shapeDim {
								return nil
							}
							var dim Dim
							err := fields(d, func(n protowire.Number, x []byte) error {
								switch n {
								case dimValue:
									val, k := protowire.ConsumeVarint(x)
									if k < 0 {
										return protowire.ParseError(k)
									}
									dim.Value = int64(val)
								case dimParam:
									dim.Param = string(x)
								}
								return nil
							})
							v.Shape = append(v.Shape, dim)
							return err
						})
					}
					return nil
				})
			})
		}
		return nil
	})
	return v, err
}

// fields calls fn with each field of a protobuf message: the field number
// and, for a length-delimited field, its bytes, for a varint its encoding.
// Other wire types are skipped.
func fields(b []byte, fn func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			x, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			v, n = x, k
		case protowire.VarintType:
			_, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			v, n = b[:k], k
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
		}
		b = b[n:]
		if v == nil {
			continue
		}
		if err := fn(num, v); err != nil {
			return err
		}
	}
	return nil
}

// Check reports whether an interface fits the federation: exactly one
// float32 input of shape [batch, features] and one float32 output of shape
// [batch, classes], the batch dimension symbolic or unknown. The error
// (ErrInterface) says what differs.
func (it Interface) Check(features, classes int) error {
	check := func(what string, vs []Value, width int) error {
		if len(vs) != 1 {
			return fmt.Errorf("%w: it has %d %ss, want one float32 %s of shape [batch, %d]", ErrInterface, len(vs), what, what, width)
		}
		v := vs[0]
		switch {
		case v.ElemType != typeFloat:
			return fmt.Errorf("%w: %s %q has element type %d, want float32 (1)", ErrInterface, what, v.Name, v.ElemType)
		case len(v.Shape) != 2:
			return fmt.Errorf("%w: %s %q has shape %s, want [batch, %d]: flatten it in the model (rows of %d values, images channel-last)", ErrInterface, what, v.Name, v.shape(), width, width)
		case v.Shape[0].Value > 0:
			return fmt.Errorf("%w: %s %q has a fixed batch size %d, want a symbolic one (export with a dynamic batch axis)", ErrInterface, what, v.Name, v.Shape[0].Value)
		case v.Shape[1].Value != int64(width):
			return fmt.Errorf("%w: %s %q has shape %s, want [batch, %d]", ErrInterface, what, v.Name, v.shape(), width)
		}
		return nil
	}
	if err := check("input", it.Inputs, features); err != nil {
		return err
	}
	return check("output", it.Outputs, classes)
}

// CheckFile reads the model at path and checks its interface against the
// federation's features and classes; errors name the file.
func CheckFile(path string, features, classes int) error {
	b, err := readModel(path)
	if err != nil {
		return err
	}
	it, err := ReadInterface(b)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInterface, path, err)
	}
	if err := it.Check(features, classes); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func readModel(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ONNX model: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxModelFile+1))
	if err != nil {
		return nil, fmt.Errorf("ONNX model %s: %w", path, err)
	}
	if len(b) > maxModelFile {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInterface, path, maxModelFile)
	}
	return b, nil
}
