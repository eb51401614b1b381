package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestTensorJSONRoundTrip(t *testing.T) {
	tests := []struct {
		datatype string
		data     string
	}{
		{"BOOL", "[true,false]"},
		{"UINT8", "[0,255]"},
		{"UINT16", "[0,65535]"},
		{"UINT32", "[0,4294967295]"},
		{"UINT64", "[0,18446744073709551615]"},
		{"INT8", "[-128,127]"},
		{"INT16", "[-32768,32767]"},
		{"INT32", "[-2147483648,2147483647]"},
		{"INT64", "[-9223372036854775808,9223372036854775807]"},
		{"FP32", "[-1.5,3.25]"},
		{"FP64", "[-1e-300,2.5e+300]"},
		{"BYTES", `["héllo",""]`},
	}
	for _, tc := range tests {
		t.Run(tc.datatype, func(t *testing.T) {
			in := fmt.Sprintf(`{"name":"x","datatype":"%s","shape":[2],"data":%s}`, tc.datatype, tc.data)
			var tensor Tensor
			if err := json.Unmarshal([]byte(in), &tensor); err != nil {
				t.Fatal(err)
			}
			if err := tensor.Validate(); err != nil {
				t.Fatal(err)
			}
			out, err := json.Marshal(tensor)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != in {
				t.Errorf("JSON round trip:\n got %s\nwant %s", out, in)
			}
			packed, err := msgpack.Marshal(&tensor)
			if err != nil {
				t.Fatal(err)
			}
			var back Tensor
			if err := msgpack.Unmarshal(packed, &back); err != nil {
				t.Fatal(err)
			}
			if string(back.Data) != string(tensor.Data) || back.Datatype != tensor.Datatype {
				t.Errorf("msgpack round trip changed the tensor")
			}
		})
	}
}

// TestTensorMsgpackIsRaw: floats travel as one binary blob, not element by element (which would take 5 bytes each).
func TestTensorMsgpackIsRaw(t *testing.T) {
	packed, err := msgpack.Marshal(NewFP32("x", []int64{1000}, make([]float32, 1000)))
	if err != nil {
		t.Fatal(err)
	}
	if len(packed) > 4100 {
		t.Errorf("1000 floats packed into %d bytes: not raw", len(packed))
	}
}

func TestTensorJSONNested(t *testing.T) {
	var tensor Tensor
	if err := json.Unmarshal([]byte(`{"name":"x","datatype":"INT64","shape":[2,2],"data":[[1,2],[3,4]]}`), &tensor); err != nil {
		t.Fatal(err)
	}
	v, err := tensor.Int64()
	if err != nil || fmt.Sprint(v) != "[1 2 3 4]" {
		t.Errorf("nested data decoded to %v, %v", v, err)
	}
}

func TestTensorJSONErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"name":"x","datatype":"FP16","shape":[1],"data":[1]}`, `unknown datatype "FP16"`},
		{`{"name":"x","datatype":"FP32","shape":[3],"data":[1,2]}`, "2 data elements, want 3"},
		{`{"name":"x","datatype":"FP32","shape":[-1],"data":[1]}`, "negative dimension"},
		{`{"name":"x","datatype":"UINT8","shape":[1],"data":[300]}`, "300 is not a UINT8"},
		{`{"name":"x","datatype":"UINT16","shape":[1],"data":[-1]}`, "-1 is not a UINT16"},
		{`{"name":"x","datatype":"FP32","shape":[1],"data":[1e39]}`, "out of range for FP32"},
		{`{"name":"x","datatype":"FP32","shape":[1],"data":["a"]}`, "is not a number"},
		{`{"name":"x","datatype":"BOOL","shape":[1],"data":[1]}`, "is not a boolean"},
		{`{"name":"x","datatype":"BYTES","shape":[1],"data":[1]}`, "data[0] is not a string"},
		{`{"name":"x","datatype":"FP32","shape":[1]}`, "no data"},
	}
	for _, tc := range tests {
		var tensor Tensor
		err := json.Unmarshal([]byte(tc.in), &tensor)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"x"`) {
			t.Errorf("%s: error %v, want one naming the tensor and %q", tc.in, err, tc.want)
		}
	}
}

func TestTensorValidateAndAccessors(t *testing.T) {
	bad := []Tensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{2}, Data: make([]byte, 7)},
		{Name: "x", Datatype: "BYTES", Shape: []int64{1}, Data: []byte{5, 0, 0}},
		{Name: "x", Datatype: "BYTES", Shape: []int64{1}, Data: []byte{5, 0, 0, 0, 'a'}},
		{Name: "x", Datatype: "nope", Shape: []int64{1}, Data: []byte{1}},
	}
	for _, b := range bad {
		if err := b.Validate(); err == nil {
			t.Errorf("Validate accepted %+v", b)
		}
	}
	f, err := NewFP32("f", []int64{3}, []float32{1, 2.5, -3}).FP32()
	if err != nil || fmt.Sprint(f) != "[1 2.5 -3]" {
		t.Errorf("FP32 round trip: %v %v", f, err)
	}
	// The wire is little-endian whatever the host: 1.0 is 00 00 80 3f. Appending keeps what dst held.
	if got := NewFP32("f", []int64{2}, []float32{1, -2}).Data; !bytes.Equal(got, []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}) {
		t.Errorf("NewFP32 bytes % x, want little-endian 00 00 80 3f 00 00 00 c0", got)
	}
	if got, err := (Tensor{Name: "f", Datatype: "FP32", Shape: []int64{1}, Data: []byte{0, 0, 0x20, 0x40}}).AppendFP32([]float32{7}); err != nil || fmt.Sprint(got) != "[7 2.5]" {
		t.Errorf("AppendFP32 onto [7]: %v %v, want [7 2.5]", got, err)
	}
	if got, err := NewFP32("e", []int64{0}, nil).FP32(); err != nil || len(got) != 0 {
		t.Errorf("empty FP32 round trip: %v %v", got, err)
	}
	s, err := NewBytes("s", [][]byte{[]byte("a"), []byte("bc")}).Strings()
	if err != nil || fmt.Sprint(s) != "[a bc]" {
		t.Errorf("BYTES round trip: %v %v", s, err)
	}
	if _, err := NewInt64("i", []int64{1}, []int64{1}).FP32(); err == nil {
		t.Error("FP32() on an INT64 tensor succeeded")
	}
}

func BenchmarkTensorMsgpack(b *testing.B) {
	tensor := NewFP32("x", []int64{1, 3, 112, 112}, make([]float32, 3*112*112)) // 150 KB
	b.SetBytes(int64(len(tensor.Data)))
	for b.Loop() {
		packed, _ := msgpack.Marshal(&tensor)
		var back Tensor
		if err := msgpack.Unmarshal(packed, &back); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTensorJSONFP32Extremes: the largest and smallest FP32 magnitudes read back as written (found by
// FuzzTensorAccessors: ±3.4028235e+38, the shortest form of MaxFloat32, is above it as a float64, and was refused).
func TestTensorJSONFP32Extremes(t *testing.T) {
	for _, data := range []string{"[-3.4028235e+38,3.4028235e+38]", "[1e-45,-1e-45]"} {
		in := `{"name":"x","datatype":"FP32","shape":[2],"data":` + data + `}`
		var tensor Tensor
		if err := json.Unmarshal([]byte(in), &tensor); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if out, err := json.Marshal(tensor); err != nil || string(out) != in {
			t.Errorf("round trip of %s: %s %v", in, out, err)
		}
	}
	// Past MaxFloat32 by more than half a unit in the last place, a number rounds to infinity: refused.
	var tensor Tensor
	if err := json.Unmarshal([]byte(`{"name":"x","datatype":"FP32","shape":[1],"data":[3.4028236e+38]}`), &tensor); err == nil ||
		!strings.Contains(err.Error(), "out of range for FP32") {
		t.Errorf("3.4028236e+38 as FP32: %v, want out of range", err)
	}
}
