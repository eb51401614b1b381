package pipeline

import (
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestCheckInputs: a request's tensors are checked for well-formedness first (whatever the spec declares), then
// against the declared inputs: names, datatypes (one of a name's alternatives) and shapes, -1 being any size.
func TestCheckInputs(t *testing.T) {
	spec := &Spec{Name: "ocr", Inputs: []TensorSpec{
		{Name: "image", Datatype: "BYTES", Shape: []int64{1}},
		{Name: "image", Datatype: "UINT8", Shape: []int64{-1, -1, 3}},
		{Name: "scale", Datatype: "FP32", Shape: []int64{1}},
	}}
	png := wire.NewBytes("image", [][]byte{[]byte("png")})
	pixels := wire.Tensor{Name: "image", Datatype: "UINT8", Shape: []int64{2, 1, 3}, Data: make([]byte, 6)}
	scale := wire.NewFP32("scale", []int64{1}, []float32{1})
	tests := []struct {
		name string
		spec *Spec
		in   []wire.Tensor
		want string // "" accepted
	}{
		{"encoded", spec, []wire.Tensor{png, scale}, ""},
		{"pixels, in any order", spec, []wire.Tensor{scale, pixels}, ""},
		{"the issue's crafted pixels", spec, []wire.Tensor{scale, {Name: "image", Datatype: "UINT8",
			Shape: []int64{274177, 67280421310721, 3}, Data: make([]byte, 3)}}, "inputs[1]: tensor \"image\": shape [274177 67280421310721 3] has too many elements"},
		{"data short of the shape", spec, []wire.Tensor{png, {Name: "scale", Datatype: "FP32", Shape: []int64{1}, Data: []byte{1}}}, "inputs[1]: tensor \"scale\": 1 bytes of data, want 4"},
		{"not declared", spec, []wire.Tensor{png, scale, wire.NewFP32("x", []int64{1}, []float32{1})}, `inputs[2]: tensor "x" is not an input of pipeline ocr, which takes image BYTES[1], image UINT8[-1 -1 3], scale FP32[1]`},
		{"another datatype", spec, []wire.Tensor{wire.NewFP32("image", []int64{1}, []float32{1}), scale}, `inputs[0]: tensor "image" is FP32[1]; pipeline ocr takes image BYTES[1] or image UINT8[-1 -1 3]`},
		{"another rank", spec, []wire.Tensor{{Name: "image", Datatype: "UINT8", Shape: []int64{6, 1}, Data: make([]byte, 6)}, scale}, "is UINT8[6 1]"},
		{"a fixed dimension", spec, []wire.Tensor{{Name: "image", Datatype: "UINT8", Shape: []int64{3, 1, 2}, Data: make([]byte, 6)}, scale}, "is UINT8[3 1 2]"},
		{"twice", spec, []wire.Tensor{png, scale, pixels}, `inputs[2]: tensor "image" is also inputs[0]`},
		{"missing", spec, []wire.Tensor{png}, `no input "scale"`},
		{"nothing declared: well-formed", &Spec{Name: "p"}, []wire.Tensor{wire.NewFP32("x", []int64{1}, []float32{1})}, ""},
		{"nothing declared: malformed", &Spec{Name: "p"}, []wire.Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{-1}}}, "negative dimension"},
	}
	for _, tc := range tests {
		err := tc.spec.CheckInputs(tc.in)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}
