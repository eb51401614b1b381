// Package onnxgen writes small ONNX models (MLPs and conv nets of a chosen width) with seeded weights, so that tests
// and benchmarks of the ONNX executor need no download. It encodes the few ONNX protobuf messages it needs with
// protowire (field numbers from onnx/onnx.proto); opset 17, IR version 8.
package onnxgen

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"google.golang.org/protobuf/encoding/protowire"
)

// MLP is a multilayer perceptron: In inputs, Depth hidden layers of Width units with ReLU, Out outputs. Input "x"
// [N, In], output "y" [N, Out].
type MLP struct {
	In, Width, Depth, Out int
	Seed                  uint64
}

// ConvNet is Depth 3x3 convolutions of Width channels with ReLU on a [N, Channels, Size, Size] input "x", then a
// global average pool and a linear layer to Out outputs "y" [N, Out].
type ConvNet struct {
	Channels, Size, Width, Depth, Out int
	Seed                              uint64
}

// Weights of an MLP layer, as the model stores them: W is [in, out] row-major, B is [out].
type Layer struct {
	W, B    []float32
	In, Out int
}

// Layers draws the MLP's weights (the same ones Bytes writes), for tests that compute the expected output in Go.
func (m MLP) Layers() []Layer {
	rng := rand.New(rand.NewPCG(m.Seed, 0x6d6c70))
	var ls []Layer
	in := m.In
	for i := 0; i <= m.Depth; i++ {
		out := m.Width
		if i == m.Depth {
			out = m.Out
		}
		ls = append(ls, Layer{W: randn(rng, in*out, math.Sqrt(2/float64(in))), B: randn(rng, out, 0.1), In: in, Out: out})
		in = out
	}
	return ls
}

// Forward computes the MLP in Go: the reference the tests compare ONNX Runtime's output with.
func (m MLP) Forward(x []float32) []float32 {
	ls := m.Layers()
	for i, l := range ls {
		y := make([]float32, l.Out)
		for o := 0; o < l.Out; o++ {
			s := l.B[o]
			for k := 0; k < l.In; k++ {
				s += x[k] * l.W[k*l.Out+o]
			}
			if i < len(ls)-1 && s < 0 {
				s = 0
			}
			y[o] = s
		}
		x = y
	}
	return x
}

// Bytes encodes the MLP as an ONNX model.
func (m MLP) Bytes() ([]byte, error) {
	if m.In < 1 || m.Width < 1 || m.Depth < 0 || m.Out < 1 {
		return nil, fmt.Errorf("onnxgen: MLP needs In, Width, Out >= 1 and Depth >= 0, got %+v", m)
	}
	var g graph
	cur := "x"
	for i, l := range m.Layers() {
		w, b, y := fmt.Sprintf("w%d", i), fmt.Sprintf("b%d", i), fmt.Sprintf("h%d", i)
		g.initializer(w, []int64{int64(l.In), int64(l.Out)}, l.W)
		g.initializer(b, []int64{int64(l.Out)}, l.B)
		if i == m.Depth {
			y = "y"
		}
		g.node("Gemm", []string{cur, w, b}, y)
		if i < m.Depth {
			g.node("Relu", []string{y}, y+"r")
			y += "r"
		}
		cur = y
	}
	return g.model("mlp", []int64{-1, int64(m.In)}, []int64{-1, int64(m.Out)}), nil
}

// Bytes encodes the conv net as an ONNX model.
func (c ConvNet) Bytes() ([]byte, error) {
	if c.Channels < 1 || c.Size < 1 || c.Width < 1 || c.Depth < 1 || c.Out < 1 {
		return nil, fmt.Errorf("onnxgen: ConvNet needs every size >= 1, got %+v", c)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x636e76))
	var g graph
	cur, in := "x", c.Channels
	for i := 0; i < c.Depth; i++ {
		w, b, y := fmt.Sprintf("cw%d", i), fmt.Sprintf("cb%d", i), fmt.Sprintf("c%d", i)
		g.initializer(w, []int64{int64(c.Width), int64(in), 3, 3}, randn(rng, c.Width*in*9, math.Sqrt(2/float64(in*9))))
		g.initializer(b, []int64{int64(c.Width)}, randn(rng, c.Width, 0.1))
		g.node("Conv", []string{cur, w, b}, y, attrInts("kernel_shape", 3, 3), attrInts("pads", 1, 1, 1, 1))
		g.node("Relu", []string{y}, y+"r")
		cur, in = y+"r", c.Width
	}
	g.node("GlobalAveragePool", []string{cur}, "pool")
	g.node("Flatten", []string{"pool"}, "flat")
	g.initializer("fw", []int64{int64(c.Width), int64(c.Out)}, randn(rng, c.Width*c.Out, math.Sqrt(1/float64(c.Width))))
	g.initializer("fb", []int64{int64(c.Out)}, randn(rng, c.Out, 0.1))
	g.node("Gemm", []string{"flat", "fw", "fb"}, "y")
	s := int64(c.Size)
	return g.model("convnet", []int64{-1, int64(c.Channels), s, s}, []int64{-1, int64(c.Out)}), nil
}

func randn(rng *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * std)
	}
	return v
}

// graph accumulates the encoded fields of a GraphProto.
type graph struct {
	nodes, inits []byte
	n            int
}

// ONNX protobuf field numbers and enum values used here.
const (
	tensorFloat = 1 // TensorProto.DataType FLOAT
	attrTypeInt = 7 // AttributeProto.AttributeType INTS
)

func (g *graph) initializer(name string, dims []int64, data []float32) {
	var t []byte
	for _, d := range dims {
		t = protowire.AppendTag(t, 1, protowire.VarintType) // dims
		t = protowire.AppendVarint(t, uint64(d))
	}
	t = protowire.AppendTag(t, 2, protowire.VarintType) // data_type
	t = protowire.AppendVarint(t, tensorFloat)
	t = protowire.AppendTag(t, 8, protowire.BytesType) // name
	t = protowire.AppendString(t, name)
	raw := make([]byte, 4*len(data))
	for i, f := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
	}
	t = protowire.AppendTag(t, 9, protowire.BytesType) // raw_data
	t = protowire.AppendBytes(t, raw)
	g.inits = protowire.AppendTag(g.inits, 5, protowire.BytesType) // GraphProto.initializer
	g.inits = protowire.AppendBytes(g.inits, t)
}

// attr is an encoded AttributeProto.
type attr []byte

func attrInts(name string, v ...int64) attr {
	var a []byte
	a = protowire.AppendTag(a, 1, protowire.BytesType)
	a = protowire.AppendString(a, name)
	for _, x := range v {
		a = protowire.AppendTag(a, 8, protowire.VarintType) // ints
		a = protowire.AppendVarint(a, uint64(x))
	}
	a = protowire.AppendTag(a, 20, protowire.VarintType) // type
	a = protowire.AppendVarint(a, attrTypeInt)
	return a
}

func (g *graph) node(op string, inputs []string, output string, attrs ...attr) {
	var n []byte
	for _, in := range inputs {
		n = protowire.AppendTag(n, 1, protowire.BytesType)
		n = protowire.AppendString(n, in)
	}
	n = protowire.AppendTag(n, 2, protowire.BytesType)
	n = protowire.AppendString(n, output)
	n = protowire.AppendTag(n, 3, protowire.BytesType)
	n = protowire.AppendString(n, fmt.Sprintf("n%d", g.n))
	g.n++
	n = protowire.AppendTag(n, 4, protowire.BytesType)
	n = protowire.AppendString(n, op)
	for _, a := range attrs {
		n = protowire.AppendTag(n, 5, protowire.BytesType)
		n = protowire.AppendBytes(n, a)
	}
	g.nodes = protowire.AppendTag(g.nodes, 1, protowire.BytesType) // GraphProto.node
	g.nodes = protowire.AppendBytes(g.nodes, n)
}

// valueInfo encodes a float tensor ValueInfoProto; a negative dimension is the symbolic batch dimension "N".
func valueInfo(name string, dims []int64) []byte {
	var shape []byte
	for _, d := range dims {
		var dim []byte
		if d < 0 {
			dim = protowire.AppendTag(dim, 2, protowire.BytesType) // dim_param
			dim = protowire.AppendString(dim, "N")
		} else {
			dim = protowire.AppendTag(dim, 1, protowire.VarintType) // dim_value
			dim = protowire.AppendVarint(dim, uint64(d))
		}
		shape = protowire.AppendTag(shape, 1, protowire.BytesType)
		shape = protowire.AppendBytes(shape, dim)
	}
	var tt []byte // TypeProto.Tensor
	tt = protowire.AppendTag(tt, 1, protowire.VarintType)
	tt = protowire.AppendVarint(tt, tensorFloat)
	tt = protowire.AppendTag(tt, 2, protowire.BytesType)
	tt = protowire.AppendBytes(tt, shape)
	var typ []byte // TypeProto
	typ = protowire.AppendTag(typ, 1, protowire.BytesType)
	typ = protowire.AppendBytes(typ, tt)
	var vi []byte
	vi = protowire.AppendTag(vi, 1, protowire.BytesType)
	vi = protowire.AppendString(vi, name)
	vi = protowire.AppendTag(vi, 2, protowire.BytesType)
	vi = protowire.AppendBytes(vi, typ)
	return vi
}

func (g *graph) model(name string, in, out []int64) []byte {
	var gr []byte
	gr = append(gr, g.nodes...)
	gr = protowire.AppendTag(gr, 2, protowire.BytesType)
	gr = protowire.AppendString(gr, name)
	gr = append(gr, g.inits...)
	gr = protowire.AppendTag(gr, 11, protowire.BytesType)
	gr = protowire.AppendBytes(gr, valueInfo("x", in))
	gr = protowire.AppendTag(gr, 12, protowire.BytesType)
	gr = protowire.AppendBytes(gr, valueInfo("y", out))

	var opset []byte
	opset = protowire.AppendTag(opset, 2, protowire.VarintType) // version
	opset = protowire.AppendVarint(opset, 17)

	var m []byte
	m = protowire.AppendTag(m, 1, protowire.VarintType) // ir_version
	m = protowire.AppendVarint(m, 8)
	m = protowire.AppendTag(m, 2, protowire.BytesType) // producer_name
	m = protowire.AppendString(m, "sleipnir-onnxgen")
	m = protowire.AppendTag(m, 7, protowire.BytesType) // graph
	m = protowire.AppendBytes(m, gr)
	m = protowire.AppendTag(m, 8, protowire.BytesType) // opset_import
	m = protowire.AppendBytes(m, opset)
	return m
}
