package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/alloctest"
)

// Fuzz targets for every decoder that reads what arrives from outside: requests (msgpack and JSON), tensors, task,
// result and demand messages, headers and worker registrations. Seeds, crafted inputs among them, are in
// testdata/fuzz/<target>; `make fuzz` runs each target for FUZZTIME.

// FuzzTensorJSON: a tensor JSON accepts is valid, and survives marshal and unmarshal unchanged.
func FuzzTensorJSON(f *testing.F) {
	f.Add([]byte(`{"name":"x","datatype":"FP32","shape":[2],"data":[1.5,-2]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var t1 Tensor
		var err error
		if n := alloctest.Bytes(func() { err = json.Unmarshal(data, &t1) }); n > alloctest.JSONBound(len(data)) {
			t.Fatalf("unmarshalling %d bytes allocated %d", len(data), n)
		}
		if err != nil {
			return
		}
		if err := t1.Validate(); err != nil {
			t.Fatalf("UnmarshalJSON accepted a tensor Validate refuses: %v", err)
		}
		out, err := json.Marshal(t1)
		if err != nil {
			t.Fatalf("MarshalJSON of an accepted tensor: %v", err)
		}
		var t2 Tensor
		if err := json.Unmarshal(out, &t2); err != nil {
			t.Fatalf("%s does not unmarshal: %v", out, err)
		}
		if t2.Name != t1.Name || t2.Datatype != t1.Datatype || !slices.Equal(t2.Shape, t1.Shape) || !bytes.Equal(t2.Data, t1.Data) {
			t.Fatalf("round trip changed the tensor:\n%+v\n%+v", t1, t2)
		}
	})
}

// shapeOf reads a shape as 8-byte little-endian dimensions (so the fuzzer reaches any int64, 2^31-1 included).
func shapeOf(b []byte) []int64 {
	var shape []int64
	for ; len(b) >= 8; b = b[8:] {
		shape = append(shape, int64(binary.LittleEndian.Uint64(b)))
	}
	return shape
}

// FuzzTensorAccessors: on any datatype, shape and data, the accessors refuse or return what the shape says, with
// memory bounded by the input; what MarshalJSON writes reads back the same.
func FuzzTensorAccessors(f *testing.F) {
	f.Add("BYTES", binary.LittleEndian.AppendUint64(nil, 1<<31-1), []byte{1, 0, 0, 0, 'a'})
	f.Fuzz(func(t *testing.T, datatype string, shapeBytes, data []byte) {
		tensor := Tensor{Name: "x", Datatype: datatype, Shape: shapeOf(shapeBytes), Data: data}
		var verr, eerr, serr, ferr, ierr, jerr error
		var els [][]byte
		var strs []string
		var fs []float32
		var is []int64
		var js []byte
		n := alloctest.Bytes(func() {
			verr = tensor.Validate()
			els, eerr = tensor.Elements()
			strs, serr = tensor.Strings()
			fs, ferr = tensor.AppendFP32([]float32{7})
			is, ierr = tensor.Int64()
			js, jerr = json.Marshal(tensor)
		})
		if bound := 64*allocBound(len(data)+len(shapeBytes)+len(datatype)) + 1<<20; n > bound {
			t.Fatalf("accessors on %d bytes allocated %d, bound %d", len(data), n, bound)
		}
		if (verr == nil) != (jerr == nil) {
			t.Fatalf("Validate %v but MarshalJSON %v", verr, jerr)
		}
		if verr != nil {
			if !strings.Contains(verr.Error(), `"x"`) {
				t.Fatalf("error %q does not name the tensor", verr)
			}
			return
		}
		count, err := NumElements(tensor.Shape)
		if err != nil {
			t.Fatalf("Validate accepted a shape NumElements refuses: %v", err)
		}
		switch datatype {
		case DatatypeBytes:
			if eerr != nil || serr != nil || len(els) != count || len(strs) != count {
				t.Fatalf("valid BYTES: %d elements (%v), %d strings (%v), want %d", len(els), eerr, len(strs), serr, count)
			}
		case "FP32":
			if ferr != nil || len(fs) != count+1 || fs[0] != 7 {
				t.Fatalf("valid FP32: AppendFP32 onto [7] gave %d values (%v), want %d", len(fs), ferr, count+1)
			}
		case "INT64":
			if ierr != nil || len(is) != count {
				t.Fatalf("valid INT64: %d values (%v), want %d", len(is), ierr, count)
			}
		}
		var back Tensor
		if err := json.Unmarshal(js, &back); err != nil {
			// JSON has no NaN or infinity: MarshalJSON writes null, which does not read back as a number.
			if (datatype == "FP32" || datatype == "FP64") && bytes.Contains(js, []byte("null")) {
				return
			}
			t.Fatalf("MarshalJSON wrote %s, which does not unmarshal: %v", js, err)
		}
		if datatype == DatatypeBytes {
			for _, e := range els {
				if !utf8.Valid(e) { // JSON strings carry text: invalid UTF-8 becomes U+FFFD
					return
				}
			}
		}
		// JSON carries a boolean, not the byte: 2 reads back as 1.
		if !bytes.Equal(back.Data, tensor.Data) && datatype != "BOOL" {
			t.Fatalf("JSON round trip changed the data: % x to % x", tensor.Data, back.Data)
		}
	})
}

// fuzzMsgpack checks a msgpack payload type: decoding any input allocates at most allocBound of it, and what decodes
// re-encodes to bytes that decode and encode to the same bytes. check runs on what decoded.
func fuzzMsgpack[T any](f *testing.F, seed T, check func(t *testing.T, v *T)) {
	b, err := msgpack.Marshal(&seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var v T
		var err error
		n := alloctest.Bytes(func() {
			err = UnmarshalMsgpack(data, &v)
			if err == nil && check != nil {
				check(t, &v)
			}
		})
		if n > allocBound(len(data)) {
			t.Fatalf("decoding %d bytes allocated %d, bound %d", len(data), n, allocBound(len(data)))
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		b1, err := msgpack.Marshal(&v)
		if err != nil {
			t.Fatalf("what decoded does not encode: %v", err)
		}
		var w T
		if err := UnmarshalMsgpack(b1, &w); err != nil {
			t.Fatalf("what we encode does not decode: %v", err)
		}
		b2, err := msgpack.Marshal(&w)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("round trip changed the encoding (%v):\n% x\n% x", err, b1, b2)
		}
	})
}

// checkTensors runs Validate and every accessor a receiver may call on decoded tensors (bounded by fuzzMsgpack).
func checkTensors(t *testing.T, ts []Tensor) {
	for _, x := range ts {
		if err := x.Validate(); err != nil {
			continue
		}
		_, _ = x.Elements()
		_, _ = x.Strings()
		_, _ = x.FP32()
		_, _ = x.Int64()
		if _, err := json.Marshal(x); err != nil {
			t.Fatalf("a valid tensor does not marshal to JSON: %v", err)
		}
	}
}

var seedTensors = []Tensor{NewFP32("image", []int64{1, 2}, []float32{0.5, 1.5}), NewBytes("text", [][]byte{[]byte("hi")})}

func FuzzInferRequestMsgpack(f *testing.F) {
	fuzzMsgpack(f, InferRequest{ID: "r1", Inputs: seedTensors}, func(t *testing.T, r *InferRequest) { checkTensors(t, r.Inputs) })
}

func FuzzTaskMessageMsgpack(f *testing.F) {
	fuzzMsgpack(f, TaskMessage{Items: []Item{{ID: "0.1", Den: 2, Inputs: seedTensors}}}, func(t *testing.T, m *TaskMessage) {
		for _, it := range m.Items {
			checkTensors(t, it.Inputs)
		}
	})
}

func FuzzResultMessageMsgpack(f *testing.F) {
	fuzzMsgpack(f, ResultMessage{RequestID: "r", Items: []ItemResult{{ID: "0", Den: 1, Path: []string{"a/b"}, Status: ItemOK, Outputs: seedTensors}}},
		func(t *testing.T, m *ResultMessage) {
			for _, it := range m.Items {
				checkTensors(t, it.Outputs)
			}
		})
}

func FuzzDemandReportMsgpack(f *testing.F) {
	fuzzMsgpack(f, DemandReport{Frontend: "f1", Count: 12, IntervalMs: 1000}, nil)
}

// FuzzInferRequestJSON: a JSON request decodes with bounded memory, and what decodes survives a JSON round trip.
func FuzzInferRequestJSON(f *testing.F) {
	f.Add([]byte(`{"id":"r1","inputs":[{"name":"image","datatype":"FP32","shape":[1,2],"data":[[0.5,1.5]]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) { alloctest.DecodeJSON[InferRequest](t, data) })
}

// FuzzHeaders: the header values workers and frontends read; what they accept formats back to the same value.
func FuzzHeaders(f *testing.F) {
	f.Add("1700000000000000000", "detect/yolo,classify/resnet")
	f.Fuzz(func(t *testing.T, deadline, path string) {
		if d, err := ParseDeadline(deadline); err != nil {
			if !strings.Contains(err.Error(), HeaderDeadline) {
				t.Fatalf("error %q does not name the header", err)
			}
		} else if back, err := ParseDeadline(FormatDeadline(d)); err != nil || !back.Equal(d) || d.UnixNano() <= 0 {
			t.Fatalf("deadline %q: %v, formatted and parsed back %v %v", deadline, d, back, err)
		}
		hops := SplitPath(path)
		if strings.Join(hops, ",") != path {
			t.Fatalf("SplitPath(%q) = %q does not join back", path, hops)
		}
		got := SplitPath(AppendPath(path, VariantKey{Task: "t", Variant: "v"}))
		if !slices.Equal(got, append(hops, "t/v")) {
			t.Fatalf("SplitPath(AppendPath(%q)) = %q", path, got)
		}
	})
}

// FuzzRegistrationJSON: the worker registrations the planner reads from the KV bucket.
func FuzzRegistrationJSON(f *testing.F) {
	f.Add([]byte(`{"id":"w1","started":"2026-01-02T03:04:05Z","updated":"2026-01-02T03:04:06.5Z","variant":"traffic:detect/yolo",` +
		`"stats":{"messages":3,"items":4,"batches":2,"dropped":1,"failed":0,"discarded":0,"rerouted":0,"returned":0,"drop_reasons":{"deadline":1}},` +
		`"heartbeat":7,"observed":{"traffic:detect/yolo":{"items":4,"children":{"classify":9},"batches":2,"queue_wait_ms":1.5,"dropped":{"deadline":1}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) { alloctest.DecodeJSON[Registration](t, data) })
}
