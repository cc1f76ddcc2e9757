// Package onnx writes the project's Go models as ONNX models and reads the
// declared inputs and outputs of any ONNX model, in pure Go: the protobuf
// encoding is written and read here with protowire, without the ONNX
// schema's generated code and without ONNX Runtime. Running ONNX models is
// the business of party/teacher's onnx build (build tag onnx).
//
// An NZC model takes the federation's feature rows as they travel, one row
// of float32 per example (images channel-last, HWC), and returns one score
// per class; the teacher's vote is the class of the highest score. An ONNX
// model a hospital brings must have the same interface: one float32 input
// of shape [batch, features] and one float32 output of shape [batch,
// classes] (CheckInterface).
package onnx

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nzcfed/nzc/ml/model"
)

// Names of the graph's input and output in the models Export writes.
const (
	InputName  = "features"
	OutputName = "logits"
)

// Versions written by Export: ONNX IR version 8 and the default-domain
// opset 13, which ONNX Runtime 1.14 and later run.
const (
	irVersion = 8
	opset     = 13
)

// ONNX tensor element types (TensorProto.DataType).
const (
	typeFloat = 1
	typeInt64 = 7
)

// Field numbers of the ONNX protobuf schema (onnx.proto) used here.
const (
	modelIRVersion   = 1
	modelProducer    = 2
	modelGraph       = 7
	modelOpsetImport = 8

	opsetDomain  = 1
	opsetVersion = 2

	graphNode        = 1
	graphName        = 2
	graphInitializer = 5
	graphInput       = 11
	graphOutput      = 12

	nodeInput     = 1
	nodeOutput    = 2
	nodeName      = 3
	nodeOpType    = 4
	nodeAttribute = 5

	attrName = 1
	attrInts = 8
	attrType = 20

	attrTypeInts = 7

	tensorDims     = 1
	tensorDataType = 2
	tensorName     = 8
	tensorRawData  = 9

	valueName = 1
	valueType = 2

	typeTensor     = 1
	tensorElemType = 1
	tensorShape    = 2
	shapeDim       = 1
	dimValue       = 1
	dimParam       = 2
)

// Export encodes net as an ONNX model: input "features" [N, features],
// output "logits" [N, classes], computing exactly what the Go network
// computes (convolution blocks as Conv, Relu and MaxPool on NCHW, dense
// layers as Gemm).
func Export(net *model.Network) ([]byte, error) {
	spec := net.Spec()
	if _, err := spec.Validate(); err != nil {
		return nil, err
	}
	ps := net.Parameters()
	g := &graph{}
	in := spec.Input
	x := InputName
	next := func() []float32 {
		p := ps[0]
		ps = ps[1:]
		return p
	}
	if len(spec.Conv) > 0 {
		// The features are HWC rows; ONNX convolutions work on NCHW.
		x = g.node("Reshape", []string{x, g.int64s("shape_hwc", []int64{-1, int64(in.Height), int64(in.Width), int64(in.Channels)})}, nil)
		x = g.node("Transpose", []string{x}, []attribute{ints("perm", 0, 3, 1, 2)})
		sh := in
		for i, c := range spec.Conv {
			w, b := next(), next()
			k, ch := c.Kernel, sh.Channels
			// Go: w[f][(ky·k + kx)·C + c]; ONNX: W[f][c][ky][kx].
			ow := make([]float32, len(w))
			for f := range c.Filters {
				for ky := range k {
					for kx := range k {
						for cc := range ch {
							ow[((f*ch+cc)*k+ky)*k+kx] = w[f*k*k*ch+(ky*k+kx)*ch+cc]
						}
					}
				}
			}
			wn := g.floats(fmt.Sprintf("conv%d_w", i), []int64{int64(c.Filters), int64(ch), int64(k), int64(k)}, ow)
			bn := g.floats(fmt.Sprintf("conv%d_b", i), []int64{int64(c.Filters)}, b)
			p := int64(k / 2)
			x = g.node("Conv", []string{x, wn, bn}, []attribute{ints("kernel_shape", int64(k), int64(k)), ints("pads", p, p, p, p), ints("strides", 1, 1)})
			x = g.node("Relu", []string{x}, nil)
			x = g.node("MaxPool", []string{x}, []attribute{ints("kernel_shape", 2, 2), ints("strides", 2, 2)})
			sh.Channels = c.Filters
			sh.Height, sh.Width = sh.Height/2, sh.Width/2
		}
		// Back to HWC, flattened as the Go dense layers read it.
		x = g.node("Transpose", []string{x}, []attribute{ints("perm", 0, 2, 3, 1)})
		x = g.node("Reshape", []string{x, g.int64s("shape_flat", []int64{-1, int64(sh.Size())})}, nil)
		in = sh
	}
	width := in.Size()
	layers := append(append([]int(nil), spec.Hidden...), spec.Classes)
	for i, out := range layers {
		w, b := next(), next()
		wn := g.floats(fmt.Sprintf("dense%d_w", i), []int64{int64(width), int64(out)}, w)
		bn := g.floats(fmt.Sprintf("dense%d_b", i), []int64{int64(out)}, b)
		if i == len(layers)-1 {
			g.named("Gemm", []string{x, wn, bn}, OutputName, nil)
			break
		}
		x = g.node("Gemm", []string{x, wn, bn}, nil)
		x = g.node("Relu", []string{x}, nil)
		width = out
	}
	if len(ps) != 0 {
		return nil, fmt.Errorf("onnx: %d parameter tensors left over: the network and its specification disagree", len(ps))
	}
	var gr []byte
	for _, n := range g.nodes {
		gr = protowire.AppendTag(gr, graphNode, protowire.BytesType)
		gr = protowire.AppendBytes(gr, n)
	}
	gr = appendString(gr, graphName, "nzc-"+spec.Kind)
	for _, t := range g.inits {
		gr = protowire.AppendTag(gr, graphInitializer, protowire.BytesType)
		gr = protowire.AppendBytes(gr, t)
	}
	gr = appendMessage(gr, graphInput, valueInfo(InputName, int64(spec.Input.Size())))
	gr = appendMessage(gr, graphOutput, valueInfo(OutputName, int64(spec.Classes)))

	var m []byte
	m = protowire.AppendTag(m, modelIRVersion, protowire.VarintType)
	m = protowire.AppendVarint(m, irVersion)
	m = appendString(m, modelProducer, "nzc")
	m = appendMessage(m, modelGraph, gr)
	var op []byte
	op = appendString(op, opsetDomain, "")
	op = protowire.AppendTag(op, opsetVersion, protowire.VarintType)
	op = protowire.AppendVarint(op, opset)
	m = appendMessage(m, modelOpsetImport, op)
	return m, nil
}

// graph collects nodes and initializers, naming intermediate values.
type graph struct {
	nodes [][]byte
	inits [][]byte
	n     int
}

type attribute struct {
	name string
	ints []int64
}

func ints(name string, v ...int64) attribute { return attribute{name, v} }

// node adds a node and returns the name of its one output.
func (g *graph) node(op string, inputs []string, attrs []attribute) string {
	g.n++
	out := fmt.Sprintf("%s_%d", op, g.n)
	g.named(op, inputs, out, attrs)
	return out
}

func (g *graph) named(op string, inputs []string, out string, attrs []attribute) {
	var b []byte
	for _, in := range inputs {
		b = appendString(b, nodeInput, in)
	}
	b = appendString(b, nodeOutput, out)
	b = appendString(b, nodeName, out)
	b = appendString(b, nodeOpType, op)
	for _, a := range attrs {
		var ab []byte
		ab = appendString(ab, attrName, a.name)
		for _, v := range a.ints {
			ab = protowire.AppendTag(ab, attrInts, protowire.VarintType)
			ab = protowire.AppendVarint(ab, uint64(v))
		}
		ab = protowire.AppendTag(ab, attrType, protowire.VarintType)
		ab = protowire.AppendVarint(ab, attrTypeInts)
		b = appendMessage(b, nodeAttribute, ab)
	}
	g.nodes = append(g.nodes, b)
}

func (g *graph) floats(name string, dims []int64, v []float32) string {
	raw := make([]byte, 0, 4*len(v))
	for _, f := range v {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
	}
	g.inits = append(g.inits, tensor(name, dims, typeFloat, raw))
	return name
}

func (g *graph) int64s(name string, v []int64) string {
	raw := make([]byte, 0, 8*len(v))
	for _, x := range v {
		raw = binary.LittleEndian.AppendUint64(raw, uint64(x))
	}
	g.inits = append(g.inits, tensor(name, []int64{int64(len(v))}, typeInt64, raw))
	return name
}

func tensor(name string, dims []int64, dataType uint64, raw []byte) []byte {
	var b []byte
	for _, d := range dims {
		b = protowire.AppendTag(b, tensorDims, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d))
	}
	b = protowire.AppendTag(b, tensorDataType, protowire.VarintType)
	b = protowire.AppendVarint(b, dataType)
	b = appendString(b, tensorName, name)
	b = protowire.AppendTag(b, tensorRawData, protowire.BytesType)
	return protowire.AppendBytes(b, raw)
}

// valueInfo declares a float32 tensor of shape [N, width].
func valueInfo(name string, width int64) []byte {
	var shape []byte
	var batch []byte
	batch = appendString(batch, dimParam, "N")
	shape = appendMessage(shape, shapeDim, batch)
	var w []byte
	w = protowire.AppendTag(w, dimValue, protowire.VarintType)
	w = protowire.AppendVarint(w, uint64(width))
	shape = appendMessage(shape, shapeDim, w)
	var tt []byte
	tt = protowire.AppendTag(tt, tensorElemType, protowire.VarintType)
	tt = protowire.AppendVarint(tt, typeFloat)
	tt = appendMessage(tt, tensorShape, shape)
	var typ []byte
	typ = appendMessage(typ, typeTensor, tt)
	var b []byte
	b = appendString(b, valueName, name)
	return appendMessage(b, valueType, typ)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}
