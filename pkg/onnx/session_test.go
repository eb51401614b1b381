package onnx_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/onnxgen"
	"github.com/sleipnir-serving/sleipnir/internal/onnxtest"
	"github.com/sleipnir-serving/sleipnir/pkg/onnx"
)

// First in the file: once a test loads the runtime, a missing library can no longer be noticed.
func TestInitMissingLibrary(t *testing.T) {
	if onnx.Version() != "" {
		t.Skip("ONNX Runtime is already loaded in this process")
	}
	if err := onnx.Init(filepath.Join(t.TempDir(), "libonnxruntime.so.1")); err == nil {
		t.Fatal("Init of a missing library succeeded")
	}
}

func writeModel(t testing.TB, m interface{ Bytes() ([]byte, error) }) string {
	t.Helper()
	b, err := m.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "model.onnx")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A generated MLP, run by ONNX Runtime in a batch, gives what the same weights give in Go, row by row.
func TestSessionMLPMatchesGo(t *testing.T) {
	onnxtest.Runtime(t)
	m := onnxgen.MLP{In: 16, Width: 32, Depth: 3, Out: 5, Seed: 7}
	s, err := onnx.Open(writeModel(t, m), onnx.SessionOptions{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 4
	x := make([]float32, n*m.In)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)))
	}
	outs, err := s.Run([]int64{n, int64(m.In)}, x)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || len(outs[0].Shape) != 2 || outs[0].Shape[0] != n || outs[0].Shape[1] != int64(m.Out) {
		t.Fatalf("outputs %+v, want one [%d %d]", outs, n, m.Out)
	}
	checkMLP(t, "batch of 4", m, outs, x)
}

// checkMLP checks that outs, a batch run of m on x, holds what the same weights give in Go, row by row.
func checkMLP(t *testing.T, name string, m onnxgen.MLP, outs []onnx.Output, x []float32) {
	t.Helper()
	for r := 0; r < len(x)/m.In; r++ {
		for j, w := range m.Forward(x[r*m.In : (r+1)*m.In]) {
			if got := outs[0].Data[r*m.Out+j]; math.Abs(float64(got-w)) > 1e-4*(1+math.Abs(float64(w))) {
				t.Errorf("%s: row %d output %d: ONNX Runtime %g, Go %g", name, r, j, got, w)
			}
		}
	}
}

func TestSessionConvNet(t *testing.T) {
	onnxtest.Runtime(t)
	c := onnxgen.ConvNet{Channels: 3, Size: 16, Width: 8, Depth: 2, Out: 4, Seed: 1}
	s, err := onnx.Open(writeModel(t, c), onnx.SessionOptions{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	outs, err := s.Run([]int64{2, 3, 16, 16}, make([]float32, 2*3*16*16))
	if err != nil {
		t.Fatal(err)
	}
	if got := outs[0].Shape; len(got) != 2 || got[0] != 2 || got[1] != 4 {
		t.Fatalf("output shape %v, want [2 4]", got)
	}
}

func TestOpenErrors(t *testing.T) {
	onnxtest.Runtime(t)
	bad := filepath.Join(t.TempDir(), "bad.onnx")
	os.WriteFile(bad, []byte("not a model"), 0o644)
	for _, p := range []string{bad, filepath.Join(t.TempDir(), "missing.onnx")} {
		if _, err := onnx.Open(p, onnx.SessionOptions{}); err == nil {
			t.Errorf("Open(%s) succeeded", p)
		}
	}
	s, err := onnx.Open(writeModel(t, onnxgen.MLP{In: 4, Width: 4, Depth: 1, Out: 2}), onnx.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Run([]int64{1, 5}, make([]float32, 5)); err == nil {
		t.Error("a wrongly shaped input ran")
	}
}

// A session keeps the tensors of the shapes it has run: later runs of a shape reuse them and still give the model's
// output for their own input, whether the input was copied in or written into Input's buffer; an input of the wrong
// length for a kept shape is refused.
func TestSessionReusesTensorsPerShape(t *testing.T) {
	onnxtest.Runtime(t)
	m := onnxgen.MLP{In: 8, Width: 16, Depth: 2, Out: 3, Seed: 9}
	s, err := onnx.Open(writeModel(t, m), onnx.SessionOptions{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fill := func(x []float32, seed float64) []float32 {
		for i := range x {
			x[i] = float32(math.Sin(seed + float64(i)))
		}
		return x
	}
	for i, n := range []int{2, 2, 3, 2, 3, 3} { // shapes [2 8] and [3 8], each seen again
		shape := []int64{int64(n), int64(m.In)}
		x := fill(make([]float32, n*m.In), float64(i))
		if i >= 3 { // through Input: the kept tensor's own memory
			x = fill(s.Input(shape), float64(i))
		}
		outs, err := s.Run(shape, x)
		if err != nil {
			t.Fatal(err)
		}
		checkMLP(t, fmt.Sprintf("run %d", i), m, outs, slices.Clone(x))
	}
	if _, err := s.Run([]int64{2, int64(m.In)}, make([]float32, 2*m.In-1)); err == nil {
		t.Error("an input one element short of its kept shape ran")
	}
}
