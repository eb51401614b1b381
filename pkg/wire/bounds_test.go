package wire

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/alloctest"

	"github.com/vmihailenco/msgpack/v5"
)

// allocBound is what decoding an input of n bytes may allocate: a multiple of its size, plus the decoders' fixed
// costs. A length claimed by the input and believed would allocate gigabytes.
func allocBound(n int) uint64 { return 256*uint64(n) + 256<<10 }

// Helpers to write msgpack by hand, claims included.
func mpStr(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) }
func mpMap(n int) []byte    { return []byte{0x80 | byte(n)} }
func mpArray(n int) []byte  { return []byte{0x90 | byte(n)} }
func mp32(code byte, n uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{code}, n)
}
func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// craftedBytesRequest is issue 25's message: a BYTES tensor whose shape claims 2^31-1 elements, with one element of
// data.
func craftedBytesRequest() []byte {
	return cat(mpMap(1), mpStr("inputs"), mpArray(1),
		mpMap(4), mpStr("name"), mpStr("image"), mpStr("datatype"), mpStr("BYTES"),
		mpStr("shape"), mpArray(1), []byte{0xce, 0x7f, 0xff, 0xff, 0xff},
		mpStr("data"), []byte{0xc4, 5, 1, 0, 0, 0, 'a'})
}

// TestCraftedBytesTensorBoundedMemory: the message that killed the frontend (a slice sized from the shape's claim in
// the BYTES splitting) is refused by Validate and the accessors with memory bounded by its size.
func TestCraftedBytesTensorBoundedMemory(t *testing.T) {
	data := craftedBytesRequest()
	var req InferRequest
	var errs []error
	n := alloctest.Bytes(func() {
		if err := UnmarshalMsgpack(data, &req); err != nil {
			t.Fatal(err)
		}
		in := req.Inputs[0]
		errs = append(errs, in.Validate())
		_, err := in.Elements()
		errs = append(errs, err)
		_, err = in.Strings()
		errs = append(errs, err)
		_, err = json.Marshal(in)
		errs = append(errs, err)
	})
	for _, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "claims 2147483647 BYTES elements") {
			t.Errorf("error %v, want one saying the shape claims 2147483647 BYTES elements", err)
		}
	}
	if n > allocBound(len(data)) {
		t.Errorf("decoding and validating %d bytes allocated %d bytes, want at most %d", len(data), n, allocBound(len(data)))
	}
	// The same tensor in JSON: the shape's claim is checked against the data elements first.
	js := `{"name":"image","datatype":"BYTES","shape":[2147483647],"data":["a"]}`
	var tensor Tensor
	var err error
	if n := alloctest.Bytes(func() { err = json.Unmarshal([]byte(js), &tensor) }); n > allocBound(len(js)) {
		t.Errorf("JSON: %d bytes allocated %d", len(js), n)
	}
	if err == nil || !strings.Contains(err.Error(), "1 data elements, want 2147483647") {
		t.Errorf("JSON: error %v", err)
	}
}

// TestMsgpackClaimedLengthsBoundedMemory: lengths claimed by every kind of msgpack container and string, with nothing
// behind them, in each payload read from outside, are refused with memory bounded by the input's size.
func TestMsgpackClaimedLengthsBoundedMemory(t *testing.T) {
	const huge = 0xffffffff
	tensor := func(field string, claim []byte) []byte {
		return cat(mpStr("inputs"), mpArray(1), mpMap(1), mpStr(field), claim)
	}
	tests := []struct {
		name  string
		into  func() any
		data  []byte
		want  string
		depth bool
	}{
		{"request inputs array32", func() any { return new(InferRequest) }, cat(mpMap(1), mpStr("inputs"), mp32(0xdd, huge)), "claims 4294967295 elements", false},
		{"request inputs array16", func() any { return new(InferRequest) }, cat(mpMap(1), mpStr("inputs"), []byte{0xdc, 0xff, 0xff}), "claims 65535 elements", false},
		{"tensor shape array32", func() any { return new(InferRequest) }, cat(mpMap(1), tensor("shape", mp32(0xdd, huge))), "claims 4294967295 elements", false},
		{"tensor data bin32", func() any { return new(InferRequest) }, cat(mpMap(1), tensor("data", mp32(0xc6, huge))), "claims 4294967295 bytes", false},
		{"tensor name str32", func() any { return new(InferRequest) }, cat(mpMap(1), tensor("name", mp32(0xdb, huge))), "claims 4294967295 bytes", false},
		{"request id str32", func() any { return new(InferRequest) }, cat(mpMap(1), mpStr("id"), mp32(0xdb, huge)), "claims 4294967295 bytes", false},
		{"request map32", func() any { return new(InferRequest) }, mp32(0xdf, huge), "claims 4294967295 elements", false},
		{"unknown field map32", func() any { return new(InferRequest) }, cat(mpMap(1), mpStr("zz"), mp32(0xdf, huge)), "claims 4294967295 elements", false},
		{"unknown field ext32", func() any { return new(InferRequest) }, cat(mpMap(1), mpStr("zz"), mp32(0xc9, huge)), "claims 4294967296 bytes", false},
		// Nested claims: each backed array holds an array claiming more than is left.
		{"nested arrays", func() any { return new(InferRequest) }, cat(mpMap(1), mpStr("inputs"), mpArray(3), mp32(0xdd, 4), mp32(0xdd, 4), mp32(0xdd, huge)), "claims", false},
		{"deep nesting", func() any { return new(InferRequest) }, cat(mpMap(1), mpStr("zz"), []byte(strings.Repeat("\x91", 100000)), []byte{0xc0}), "nests deeper than 32", true},
		{"task items array32", func() any { return new(TaskMessage) }, cat(mpMap(1), mpStr("items"), mp32(0xdd, huge)), "claims 4294967295 elements", false},
		{"task item inputs array32", func() any { return new(TaskMessage) }, cat(mpMap(1), mpStr("items"), mpArray(1), mpMap(1), mpStr("inputs"), mp32(0xdd, huge)), "claims 4294967295 elements", false},
		{"task item tensor data bin32", func() any { return new(TaskMessage) }, cat(mpMap(1), mpStr("items"), mpArray(1), mpMap(1), tensor("data", mp32(0xc6, huge))), "claims 4294967295 bytes", false},
		{"result items array32", func() any { return new(ResultMessage) }, cat(mpMap(1), mpStr("items"), mp32(0xdd, huge)), "claims 4294967295 elements", false},
		{"result path array32", func() any { return new(ResultMessage) }, cat(mpMap(1), mpStr("items"), mpArray(1), mpMap(1), mpStr("path"), mp32(0xdd, huge)), "claims 4294967295 elements", false},
		{"result outputs array32", func() any { return new(ResultMessage) }, cat(mpMap(1), mpStr("items"), mpArray(1), mpMap(1), mpStr("outputs"), mp32(0xdd, huge)), "claims 4294967295 elements", false},
		{"demand frontend str32", func() any { return new(DemandReport) }, cat(mpMap(1), mpStr("frontend"), mp32(0xdb, huge)), "claims 4294967295 bytes", false},
		{"demand gaps array32", func() any { return new(DemandReport) }, cat(mpMap(1), mpStr("gaps_ms"), mp32(0xdd, huge)), "claims 4294967295 elements", false},
		{"reply results array32", func() any { return new(InferReply) }, cat(mpMap(1), mpStr("results"), mp32(0xdd, huge)), "claims 4294967295 elements", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.into()
			var err error
			n := alloctest.Bytes(func() { err = UnmarshalMsgpack(tc.data, v) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
			if n > allocBound(len(tc.data)) {
				t.Errorf("%d bytes of input allocated %d bytes, want at most %d", len(tc.data), n, allocBound(len(tc.data)))
			}
		})
	}
}

// TestUnmarshalMsgpackAcceptsWhatWeSend: the check passes every payload the services send, nesting included.
func TestUnmarshalMsgpackAcceptsWhatWeSend(t *testing.T) {
	tensors := []Tensor{NewFP32("f", []int64{1, 2}, []float32{1, 2}), NewBytes("b", [][]byte{[]byte("x"), make([]byte, 70000)}),
		NewInt64("i", []int64{0}, nil)}
	for _, v := range []any{
		&InferRequest{ID: strings.Repeat("r", 300), Inputs: tensors},
		&TaskMessage{Items: []Item{{ID: "0.1", Den: 3, Inputs: tensors}, {ID: "0.2"}}},
		&ResultMessage{RequestID: "r", Items: []ItemResult{{ID: "0", Den: 1 << 40, Path: []string{"a/b", "c/d"}, Status: ItemOK, Outputs: tensors}}},
		&DemandReport{Frontend: "f", Count: -3, IntervalMs: 1000.5, GapsMs: make([]float32, MaxDemandGaps)},
		&InferReply{RequestID: "r", Status: StatusOK, Accuracy: 0.5, Results: []ItemResult{{ID: "0", Path: []string{}}}},
		map[string]any{"ext": msgpack.RawMessage{0xd6, 0xff, 0, 0, 0, 1}, "neg": int64(-1 << 40), "f32": float32(1.5), "u": uint64(1 << 63)},
	} {
		data, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckMsgpack(data); err != nil {
			t.Errorf("%T: %v", v, err)
		}
		for i := range data {
			if CheckMsgpack(data[:i]) == nil {
				t.Errorf("%T cut to %d of %d bytes passed the check", v, i, len(data))
				break
			}
		}
	}
}
