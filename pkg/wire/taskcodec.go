package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// A task message's msgpack, written and read without reflection: every hop decodes one and encodes one per child
// variant, and msgpack/v5's reflection was half of a worker's own time on a hop (BenchmarkHop,
// docs/measurements.md). The encoding is msgpack.Marshal's, byte for byte; the decoding gives what
// UnmarshalMsgpack gives wherever that succeeds (TestTaskCodecAgreesWithMsgpack, FuzzTaskMessageMsgpack), and
// refuses a few shapes it would take (a struct sent as an array).

// AppendTaskMessage appends m's msgpack encoding (msgpack.Marshal's) to b.
func AppendTaskMessage(b []byte, m *TaskMessage) []byte {
	b = slices.Grow(b, taskMessageSize(m))
	b = appendMapLen(b, 1)
	b = appendString(b, "items")
	if m.Items == nil {
		return append(b, 0xc0)
	}
	b = appendArrayLen(b, len(m.Items))
	for i := range m.Items {
		b = appendItem(b, &m.Items[i])
	}
	return b
}

// taskMessageSize bounds the length of m's encoding, so that it is written into one allocation.
func taskMessageSize(m *TaskMessage) int {
	n := 16
	for i := range m.Items {
		it := &m.Items[i]
		n += 48 + len(it.ID)
		for j := range it.Inputs {
			t := &it.Inputs[j]
			n += 48 + len(t.Name) + len(t.Datatype) + 9*len(t.Shape) + len(t.Data)
		}
	}
	return n
}

func appendItem(b []byte, it *Item) []byte {
	n := 3
	if it.Gear != 0 {
		n = 4
	}
	b = appendMapLen(b, n)
	b = appendString(b, "id")
	b = appendString(b, it.ID)
	b = appendString(b, "den")
	b = append(b, 0xcf)
	b = binary.BigEndian.AppendUint64(b, it.Den)
	b = appendString(b, "inputs")
	if it.Inputs == nil {
		b = append(b, 0xc0)
	} else {
		b = appendArrayLen(b, len(it.Inputs))
		for i := range it.Inputs {
			b = appendTensor(b, &it.Inputs[i])
		}
	}
	if it.Gear != 0 {
		b = appendString(b, "gear")
		b = append(b, 0xcb)
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(it.Gear))
	}
	return b
}

func appendTensor(b []byte, t *Tensor) []byte {
	b = appendMapLen(b, 4)
	b = appendString(b, "name")
	b = appendString(b, t.Name)
	b = appendString(b, "datatype")
	b = appendString(b, t.Datatype)
	b = appendString(b, "shape")
	if t.Shape == nil {
		b = append(b, 0xc0)
	} else {
		b = appendArrayLen(b, len(t.Shape))
		for _, d := range t.Shape {
			b = append(b, 0xd3)
			b = binary.BigEndian.AppendUint64(b, uint64(d))
		}
	}
	b = appendString(b, "data")
	if t.Data == nil {
		return append(b, 0xc0)
	}
	b = appendLen(b, len(t.Data), 0xc4, 0, 0xc4, 0xc5, 0xc6)
	return append(b, t.Data...)
}

func appendMapLen(b []byte, n int) []byte   { return appendLen(b, n, 0x80, 16, 0, 0xde, 0xdf) }
func appendArrayLen(b []byte, n int) []byte { return appendLen(b, n, 0x90, 16, 0, 0xdc, 0xdd) }
func appendString(b []byte, s string) []byte {
	return append(appendLen(b, len(s), 0xa0, 32, 0xd9, 0xda, 0xdb), s...)
}

// appendLen appends a length header as msgpack/v5 writes it: below fixMax in the fixed form (fix | n), else in one
// byte (code8, when the type has that form), two or four.
func appendLen(b []byte, n int, fix byte, fixMax int, code8, code16, code32 byte) []byte {
	switch {
	case n < fixMax:
		return append(b, fix|byte(n))
	case code8 != 0 && n < 256:
		return append(b, code8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, code16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, code32), uint32(n))
}

// DecodeTaskMessage decodes a task message read from outside: CheckMsgpack first, as UnmarshalMsgpack, then the
// fields msgpack/v5 would set, unknown ones skipped. Its tensors' data are data's own bytes, not copies (a delivered
// message's buffer, which nothing else writes; an image is copied once less a hop): data must not be written while
// the message is in use.
func DecodeTaskMessage(data []byte) (TaskMessage, error) {
	if err := CheckMsgpack(data); err != nil {
		return TaskMessage{}, err
	}
	r := taskReader{data: data}
	var m TaskMessage
	err := r.fields(taskMessageKeys, func(int) (err error) {
		m.Items, err = readArray(&r, (*taskReader).item)
		return err
	})
	if err != nil {
		return TaskMessage{}, fmt.Errorf("msgpack: task message: %w", err)
	}
	return m, nil
}

// taskReader reads msgpack values from data, which CheckMsgpack has passed: every length it claims is backed.
type taskReader struct {
	data []byte
	pos  int
}

var errTaskShape = errors.New("a value of the wrong type")

func (r *taskReader) item(it *Item) error {
	return r.fields(itemKeys, func(key int) (err error) {
		switch key {
		case 0:
			it.ID, err = r.string()
		case 1:
			var n int64
			n, err = r.int()
			it.Den = uint64(n)
		case 2:
			it.Inputs, err = readArray(r, (*taskReader).tensor)
		case 3:
			it.Gear, err = r.float()
		}
		return err
	})
}

func (r *taskReader) tensor(t *Tensor) error {
	return r.fields(tensorKeys, func(key int) (err error) {
		switch key {
		case 0:
			t.Name, err = r.string()
		case 1:
			var b []byte
			if b, err = r.bytes(); err == nil {
				t.Datatype = datatypeOf(b)
			}
		case 2:
			t.Shape, err = readArray(r, func(r *taskReader, d *int64) (err error) {
				*d, err = r.int()
				return err
			})
		case 3:
			var b []byte
			if b, err = r.bytes(); err == nil {
				t.Data = b[:len(b):len(b)] // nil stays nil; an append to it copies
			}
		}
		return err
	})
}

// The keys of each struct's fields, in their order: a field is passed to fields' callback by its index here.
var (
	taskMessageKeys = []string{"items"}
	itemKeys        = []string{"id", "den", "inputs", "gear"}
	tensorKeys      = []string{"name", "datatype", "shape", "data"}
)

// fields reads a map of string keys into a struct, calling field with the index in keys of each key it knows to read
// its value, and skipping the values of the others; nil leaves the struct as it was (zero). A known key given twice
// is refused: msgpack/v5 decodes the second into what the first left.
func (r *taskReader) fields(keys []string, field func(key int) error) error {
	if r.peek() == 0xc0 {
		r.pos++
		return nil
	}
	h, _, err := r.next()
	if err != nil {
		return err
	}
	if h.kind != kindMap {
		return errTaskShape
	}
	var seen uint
	for range h.count / 2 {
		key, err := r.bytes()
		if err != nil {
			return err
		}
		i := slices.IndexFunc(keys, func(k string) bool { return k == string(key) })
		if i < 0 {
			if err := r.skip(); err != nil {
				return err
			}
			continue
		}
		if seen&(1<<i) != 0 {
			return fmt.Errorf("the key %q twice", key)
		}
		seen |= 1 << i
		if err := field(i); err != nil {
			return err
		}
	}
	return nil
}

func (r *taskReader) peek() byte {
	if r.pos >= len(r.data) {
		return 0xc1 // never used: readMsgpackHead refuses it
	}
	return r.data[r.pos]
}

// datatypeOf is b as a string, the datatypes' own (no string made for one of them).
func datatypeOf(b []byte) string {
	switch string(b) {
	case "FP32":
		return "FP32"
	case "UINT8":
		return "UINT8"
	case "INT64":
		return "INT64"
	case DatatypeBytes:
		return DatatypeBytes
	}
	return string(b)
}

// readArray reads an array of values with read: nil for nil, as msgpack/v5 decodes a slice.
func readArray[T any](r *taskReader, read func(*taskReader, *T) error) ([]T, error) {
	if r.peek() == 0xc0 {
		r.pos++
		return nil, nil
	}
	h, _, err := r.next()
	if err != nil {
		return nil, err
	}
	if h.kind != kindArray {
		return nil, errTaskShape
	}
	out := make([]T, h.count)
	for i := range out {
		if err := read(r, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// next reads the header of the value at the reader's position and moves past its payload (not its elements, if it
// is an array or a map), which it gives.
func (r *taskReader) next() (msgpackHead, []byte, error) {
	h, pos, err := readMsgpackHead(r.data, r.pos)
	if err != nil {
		return h, nil, err
	}
	if uint64(len(r.data)-pos) < h.size {
		return h, nil, errTaskShape // CheckMsgpack passed only the first value of data
	}
	r.pos = pos + int(h.size)
	return h, r.data[pos:r.pos], nil
}

// bytes reads a string or binary value (msgpack/v5 takes either for either), aliasing data; nil for nil.
func (r *taskReader) bytes() ([]byte, error) {
	if r.peek() == 0xc0 {
		r.pos++
		return nil, nil
	}
	h, b, err := r.next()
	if err != nil {
		return nil, err
	}
	if h.kind != kindString && h.kind != kindBinary {
		return nil, errTaskShape
	}
	return b, nil
}

func (r *taskReader) string() (string, error) {
	b, err := r.bytes()
	return string(b), err
}

// int reads an integer of any width as msgpack/v5's DecodeInt64 does (a uint64 above the int64 range wraps).
func (r *taskReader) int() (int64, error) {
	c := r.peek()
	switch {
	case c <= 0x7f || c >= 0xe0:
		r.pos++
		return int64(int8(c)), nil
	case c == 0xc0: // msgpack/v5 reads nil as 0
		r.pos++
		return 0, nil
	case c >= 0xcc && c <= 0xd3:
		_, b, err := r.next()
		if err != nil {
			return 0, err
		}
		switch c {
		case 0xcc:
			return int64(b[0]), nil
		case 0xcd:
			return int64(binary.BigEndian.Uint16(b)), nil
		case 0xce:
			return int64(binary.BigEndian.Uint32(b)), nil
		case 0xcf:
			return int64(binary.BigEndian.Uint64(b)), nil
		case 0xd0:
			return int64(int8(b[0])), nil
		case 0xd1:
			return int64(int16(binary.BigEndian.Uint16(b))), nil
		case 0xd2:
			return int64(int32(binary.BigEndian.Uint32(b))), nil
		}
		return int64(binary.BigEndian.Uint64(b)), nil
	}
	return 0, errTaskShape
}

// float reads a float of either width, or an integer, as msgpack/v5's DecodeFloat64 does.
func (r *taskReader) float() (float64, error) {
	switch c := r.peek(); c {
	case 0xca, 0xcb:
		_, b, err := r.next()
		if err != nil {
			return 0, err
		}
		if c == 0xca {
			return float64(math.Float32frombits(binary.BigEndian.Uint32(b))), nil
		}
		return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
	}
	n, err := r.int()
	return float64(n), err
}

// skip passes over one value of any shape.
func (r *taskReader) skip() error {
	for left := 1; left > 0; left-- {
		h, _, err := r.next()
		if err != nil {
			return err
		}
		left += int(h.count)
	}
	return nil
}
