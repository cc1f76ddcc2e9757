package onnx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/model"
)

// specs are one network of each kind, small.
func specs() map[string]model.Spec {
	img := data.Shape{Height: 9, Width: 8, Channels: 2}
	return map[string]model.Spec{
		"softmax": {Kind: model.KindSoftmax, Input: data.Shape{Height: 1, Width: 7, Channels: 1}, Classes: 3},
		"mlp":     {Kind: model.KindMLP, Input: img, Classes: 4, Hidden: []int{8, 5}},
		"cnn":     {Kind: model.KindCNN, Input: img, Classes: 3, Conv: []model.Conv{{Filters: 4, Kernel: 3}, {Filters: 3, Kernel: 5}}, Hidden: []int{6}},
	}
}

func TestExportDeclaresTheFederationInterface(t *testing.T) {
	for name, spec := range specs() {
		t.Run(name, func(t *testing.T) {
			net, err := model.New(spec, 1)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Export(net)
			if err != nil {
				t.Fatal(err)
			}
			it, err := ReadInterface(b)
			if err != nil {
				t.Fatal(err)
			}
			if err := it.Check(spec.Input.Size(), spec.Classes); err != nil {
				t.Fatal(err)
			}
			if it.Inputs[0].Name != InputName || it.Outputs[0].Name != OutputName {
				t.Fatalf("interface %+v", it)
			}
			// Another federation's features or classes are refused, saying which.
			if err := it.Check(spec.Input.Size()+1, spec.Classes); !errors.Is(err, ErrInterface) || !strings.Contains(err.Error(), "input") {
				t.Fatalf("wrong features: %v", err)
			}
			if err := it.Check(spec.Input.Size(), spec.Classes+1); !errors.Is(err, ErrInterface) || !strings.Contains(err.Error(), "output") {
				t.Fatalf("wrong classes: %v", err)
			}
		})
	}
}

func TestCheckRefuses(t *testing.T) {
	float := func(name string, dims ...Dim) Value { return Value{Name: name, ElemType: typeFloat, Shape: dims} }
	n := Dim{Param: "N"}
	good := Interface{Inputs: []Value{float("x", n, Dim{Value: 784})}, Outputs: []Value{float("y", n, Dim{Value: 10})}}
	for _, tc := range []struct {
		name, mention string
		edit          func(*Interface)
	}{
		{"two inputs", "2 inputs", func(it *Interface) { it.Inputs = append(it.Inputs, it.Inputs[0]) }},
		{"no output", "0 outputs", func(it *Interface) { it.Outputs = nil }},
		{"double input", "element type 11", func(it *Interface) { it.Inputs[0].ElemType = 11 }},
		{"NCHW input", "[N, 1, 28, 28], want [batch, 784]: flatten", func(it *Interface) {
			it.Inputs[0] = float("x", n, Dim{Value: 1}, Dim{Value: 28}, Dim{Value: 28})
		}},
		{"fixed batch", "fixed batch size 1", func(it *Interface) { it.Inputs[0].Shape[0] = Dim{Value: 1} }},
		{"other features", "[N, 785], want [batch, 784]", func(it *Interface) { it.Inputs[0].Shape[1] = Dim{Value: 785} }},
		{"other classes", `output "y" has shape [N, 2], want [batch, 10]`, func(it *Interface) { it.Outputs[0].Shape[1] = Dim{Value: 2} }},
		{"no shape", "no declared shape", func(it *Interface) { it.Outputs[0].Shape = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := Interface{Inputs: append([]Value(nil), good.Inputs...), Outputs: append([]Value(nil), good.Outputs...)}
			it.Inputs[0].Shape = append([]Dim(nil), good.Inputs[0].Shape...)
			it.Outputs[0].Shape = append([]Dim(nil), good.Outputs[0].Shape...)
			tc.edit(&it)
			if err := it.Check(784, 10); !errors.Is(err, ErrInterface) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("got %v, want ErrInterface saying %q", err, tc.mention)
			}
		})
	}
	if err := good.Check(784, 10); err != nil {
		t.Fatal(err)
	}
}

func TestCheckFileNamesTheFile(t *testing.T) {
	net, err := model.New(specs()["softmax"], 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Export(net)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "teacher-1.onnx"), filepath.Join(dir, "teacher-2.onnx")
	if err := os.WriteFile(good, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckFile(good, 7, 3); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path              string
		features, classes int
	}{{good, 8, 3}, {good, 7, 10}, {bad, 7, 3}} {
		if err := CheckFile(tc.path, tc.features, tc.classes); !errors.Is(err, ErrInterface) || !strings.Contains(err.Error(), tc.path) {
			t.Fatalf("%s for %d features, %d classes: %v; want ErrInterface naming the file", tc.path, tc.features, tc.classes, err)
		}
	}
}

// FuzzReadInterface: any bytes give an interface or an error, never a panic.
func FuzzReadInterface(f *testing.F) {
	for _, spec := range specs() {
		net, err := model.New(spec, 2)
		if err != nil {
			f.Fatal(err)
		}
		b, err := Export(net)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x3a, 0x02, 0x5a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		it, err := ReadInterface(b)
		if err != nil {
			return
		}
		_ = it.Check(784, 10)
	})
}
