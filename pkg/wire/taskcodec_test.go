package wire

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/alloctest"
)

// randomTaskMessage is a task message with every field's edge cases: nil and empty slices, long strings and data
// (each length form), a gear or none, dimensions of every sign and width.
func randomTaskMessage(rng *rand.Rand) TaskMessage {
	str := func() string {
		return string(bytes.Repeat([]byte{'x'}, []int{0, 3, 31, 32, 255, 256, 70000}[rng.IntN(7)]))
	}
	var m TaskMessage
	if rng.IntN(8) == 0 {
		return m // items nil
	}
	m.Items = make([]Item, []int{0, 1, 3, 17}[rng.IntN(4)])
	for i := range m.Items {
		it := &m.Items[i]
		it.ID, it.Den = str(), rng.Uint64()>>rng.IntN(64)
		if rng.IntN(2) == 0 {
			it.Gear = rng.Float64()
		}
		if rng.IntN(6) == 0 {
			continue // inputs nil
		}
		it.Inputs = make([]Tensor, rng.IntN(3))
		for j := range it.Inputs {
			t := &it.Inputs[j]
			t.Name, t.Datatype = str(), "FP32"
			if rng.IntN(5) > 0 {
				t.Shape = make([]int64, rng.IntN(4))
				for k := range t.Shape {
					t.Shape[k] = int64(rng.Uint64()) >> rng.IntN(64)
				}
			}
			if rng.IntN(5) > 0 {
				t.Data = bytes.Repeat([]byte{7}, []int{0, 5, 255, 256, 65536}[rng.IntN(5)])
			}
		}
	}
	return m
}

// TestTaskCodecAgreesWithMsgpack: AppendTaskMessage writes msgpack.Marshal's bytes, and DecodeTaskMessage reads what
// UnmarshalMsgpack reads, on messages with every field's edge cases, and on a newer sender's fields it skips.
func TestTaskCodecAgreesWithMsgpack(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		m := randomTaskMessage(rng)
		want, err := msgpack.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendTaskMessage(nil, &m); !bytes.Equal(got, want) {
			t.Fatalf("message %d: AppendTaskMessage\n% x\nmsgpack.Marshal\n% x", n, got, want)
		}
		var viaMsgpack TaskMessage
		if err := UnmarshalMsgpack(want, &viaMsgpack); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeTaskMessage(want)
		if err != nil || !reflect.DeepEqual(got, viaMsgpack) {
			t.Fatalf("message %d: DecodeTaskMessage gave %+v, %v; msgpack %+v", n, got, err, viaMsgpack)
		}
	}
	// A newer sender's fields, at every level, and the numbers in other widths than ours.
	newer := map[string]any{"version": 2, "items": []map[string]any{{"id": "0", "den": uint8(3), "gear": float32(0.5),
		"hint": map[string]any{"a": []any{1, "b", nil}}, "inputs": []map[string]any{{"name": "x", "datatype": "FP32",
			"shape": []int8{-1, 2}, "data": []byte{1, 2, 3, 4}, "layout": "nchw"}}}}}
	data, err := msgpack.Marshal(newer)
	if err != nil {
		t.Fatal(err)
	}
	var want TaskMessage
	if err := UnmarshalMsgpack(data, &want); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeTaskMessage(data)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("a newer sender's message: got %+v, %v; msgpack %+v", got, err, want)
	}
	if want.Items[0].Gear != 0.5 || want.Items[0].Inputs[0].Shape[0] != -1 {
		t.Fatalf("msgpack read %+v", want)
	}
}

// TestDecodeTaskMessageAliasesData: a tensor's data is the message's bytes, not a copy, and appending to it leaves
// the message as it was.
func TestDecodeTaskMessageAliasesData(t *testing.T) {
	data := AppendTaskMessage(nil, &TaskMessage{Items: []Item{{ID: "0", Den: 1, Inputs: []Tensor{
		{Name: "a", Datatype: "UINT8", Shape: []int64{2}, Data: []byte{1, 2}},
		{Name: "b", Datatype: "UINT8", Shape: []int64{1}, Data: []byte{3}}}}}})
	before := slices.Clone(data)
	m, err := DecodeTaskMessage(data)
	if err != nil {
		t.Fatal(err)
	}
	a := m.Items[0].Inputs[0].Data
	if &a[0] != &data[bytes.Index(data, []byte{1, 2})] {
		t.Error("the tensor's data is a copy")
	}
	_ = append(a, 9)
	if !bytes.Equal(data, before) || m.Items[0].Inputs[1].Data[0] != 3 {
		t.Errorf("appending to a tensor's data wrote into the message: % x, was % x", data, before)
	}
}

// TestDecodeTaskMessageRefuses: what is not a task message gets an error, not a panic or a partial message.
func TestDecodeTaskMessageRefuses(t *testing.T) {
	good := AppendTaskMessage(nil, &TaskMessage{Items: []Item{{ID: "0", Den: 1, Inputs: seedTensors}}})
	twice, _ := msgpack.Marshal(map[string]any{"items": nil})
	twice = append([]byte{0x82}, append(twice[1:], twice[1:]...)...) // {"items": nil, "items": nil}
	for name, data := range map[string][]byte{
		"empty":             {},
		"cut":               good[:len(good)-3],
		"items not a list":  append(appendString(appendMapLen(nil, 1), "items"), 0x05),
		"an item as a list": append(appendString(appendMapLen(nil, 1), "items"), 0x91, 0x90),
		"a key twice":       twice,
		"a claimed length":  append(appendString(appendMapLen(nil, 1), "items"), 0xdd, 0xff, 0xff, 0xff, 0xff),
	} {
		if m, err := DecodeTaskMessage(data); err == nil {
			t.Errorf("%s: decoded %+v", name, m)
		}
	}
}

func BenchmarkTaskCodec(b *testing.B) {
	m := TaskMessage{Items: []Item{{ID: "0.1", Den: 2, Inputs: []Tensor{NewFP32("x", []int64{1, 64}, make([]float32, 64))}}}}
	data := AppendTaskMessage(nil, &m)
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeTaskMessage(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-msgpack", func(b *testing.B) {
		for b.Loop() {
			var m TaskMessage
			if err := UnmarshalMsgpack(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			_ = AppendTaskMessage(nil, &m)
		}
	})
	b.Run("encode-msgpack", func(b *testing.B) {
		for b.Loop() {
			if _, err := msgpack.Marshal(&m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzDecodeTaskMessage: any input decodes with bounded memory or is refused; what both decoders take, they read
// alike; and what DecodeTaskMessage reads, AppendTaskMessage writes back to bytes that read the same.
func FuzzDecodeTaskMessage(f *testing.F) {
	for _, m := range []TaskMessage{{}, {Items: []Item{{ID: "0.1", Den: 2, Inputs: seedTensors}}},
		{Items: []Item{{ID: "0", Den: 1, Gear: 0.93}, {ID: "1", Den: 1 << 40, Inputs: []Tensor{}}}}} {
		f.Add(AppendTaskMessage(nil, &m))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got TaskMessage
		var err error
		if n := alloctest.Bytes(func() { got, err = DecodeTaskMessage(data) }); n > allocBound(len(data)) {
			t.Fatalf("decoding %d bytes allocated %d, bound %d", len(data), n, allocBound(len(data)))
		}
		if err != nil {
			return
		}
		// Compared by their encodings: a NaN gear is not equal to itself.
		enc := AppendTaskMessage(nil, &got)
		var want TaskMessage
		if UnmarshalMsgpack(data, &want) == nil {
			if viaMsgpack, err := msgpack.Marshal(&want); err != nil || !bytes.Equal(enc, viaMsgpack) {
				t.Fatalf("DecodeTaskMessage read %+v, msgpack %+v", got, want)
			}
		}
		again, err := DecodeTaskMessage(enc)
		if err != nil || !bytes.Equal(AppendTaskMessage(nil, &again), enc) {
			t.Fatalf("what decoded does not round-trip: %+v, %v", again, err)
		}
	})
}
