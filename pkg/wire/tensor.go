package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unsafe"
)

// elemSize is the size of one element of each fixed-size datatype; BYTES is variable.
var elemSize = map[string]int{
	"BOOL": 1, "UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8,
	"INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8, "FP32": 4, "FP64": 8,
}

// DatatypeBytes is the variable-length datatype.
const DatatypeBytes = "BYTES"

// NumElements is the product of the shape; an error for negative dimensions or an absurd size.
func NumElements(shape []int64) (int, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		if d > 0 && n > math.MaxInt32/d {
			return 0, fmt.Errorf("shape %v has too many elements", shape)
		}
		n *= d
	}
	return int(n), nil
}

// Validate checks that the datatype is known and the data agrees with the shape.
func (t Tensor) Validate() error {
	n, err := NumElements(t.Shape)
	if err != nil {
		return fmt.Errorf("tensor %q: %v", t.Name, err)
	}
	if t.Datatype == DatatypeBytes {
		if _, err := splitBytes(t.Data, n); err != nil {
			return fmt.Errorf("tensor %q: %v", t.Name, err)
		}
		return nil
	}
	size, ok := elemSize[t.Datatype]
	if !ok {
		return fmt.Errorf("tensor %q: unknown datatype %q", t.Name, t.Datatype)
	}
	if len(t.Data) != n*size {
		return fmt.Errorf("tensor %q: %d bytes of data, want %d for %s%v", t.Name, len(t.Data), n*size, t.Datatype, t.Shape)
	}
	return nil
}

// splitBytes decodes n length-prefixed BYTES elements. n comes from the shape, which the sender chose: it is checked
// against the data (each element takes at least its 4-byte length) before anything is sized from it.
func splitBytes(data []byte, n int) ([][]byte, error) {
	if n > len(data)/4 {
		return nil, fmt.Errorf("the shape claims %d BYTES elements, %d bytes of data hold at most %d", n, len(data), len(data)/4)
	}
	out := make([][]byte, 0, n)
	for len(data) > 0 {
		if len(data) < 4 {
			return nil, errors.New("BYTES data ends inside a length prefix")
		}
		l := int(binary.LittleEndian.Uint32(data))
		if l > len(data)-4 {
			return nil, fmt.Errorf("BYTES element %d claims %d bytes, %d left", len(out), l, len(data)-4)
		}
		out = append(out, data[4:4+l])
		data = data[4+l:]
	}
	if len(out) != n {
		return nil, fmt.Errorf("%d BYTES elements, want %d for the shape", len(out), n)
	}
	return out, nil
}

// NewFP32 makes an FP32 tensor.
func NewFP32(name string, shape []int64, values []float32) Tensor {
	data := make([]byte, 4*len(values))
	if hostLittleEndian {
		copy(data, float32Bytes(values))
	} else {
		for i, v := range values {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
	}
	return Tensor{Name: name, Datatype: "FP32", Shape: shape, Data: data}
}

// hostLittleEndian: tensor data is little-endian on the wire, so on such hosts (amd64, arm64) FP32 elements convert
// by a plain copy, which is what keeps the executor's per-item cost small next to a model's run.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// float32Bytes is the memory of v as bytes (no copy).
func float32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// FP32 decodes an FP32 tensor's elements.
func (t Tensor) FP32() ([]float32, error) { return t.AppendFP32(nil) }

// AppendFP32 decodes an FP32 tensor's elements onto dst (a batch being stacked, without a copy per item).
func (t Tensor) AppendFP32(dst []float32) ([]float32, error) {
	if t.Datatype != "FP32" {
		return dst, fmt.Errorf("tensor %q is %s, not FP32", t.Name, t.Datatype)
	}
	if err := t.Validate(); err != nil {
		return dst, err
	}
	n := len(t.Data) / 4
	dst = slices.Grow(dst, n)
	if hostLittleEndian {
		m := len(dst)
		dst = dst[:m+n]
		copy(float32Bytes(dst[m:]), t.Data)
		return dst, nil
	}
	for i := 0; i < n; i++ {
		dst = append(dst, math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:])))
	}
	return dst, nil
}

// NewInt64 makes an INT64 tensor.
func NewInt64(name string, shape []int64, values []int64) Tensor {
	data := make([]byte, 8*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint64(data[8*i:], uint64(v))
	}
	return Tensor{Name: name, Datatype: "INT64", Shape: shape, Data: data}
}

// Int64 decodes an INT64 tensor's elements.
func (t Tensor) Int64() ([]int64, error) {
	if t.Datatype != "INT64" {
		return nil, fmt.Errorf("tensor %q is %s, not INT64", t.Name, t.Datatype)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	out := make([]int64, len(t.Data)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(t.Data[8*i:]))
	}
	return out, nil
}

// NewBytes makes a one-dimensional BYTES tensor.
func NewBytes(name string, values [][]byte) Tensor {
	var b bytes.Buffer
	for _, v := range values {
		var l [4]byte
		binary.LittleEndian.PutUint32(l[:], uint32(len(v)))
		b.Write(l[:])
		b.Write(v)
	}
	return Tensor{Name: name, Datatype: DatatypeBytes, Shape: []int64{int64(len(values))}, Data: b.Bytes()}
}

// Elements decodes a BYTES tensor's elements; they share the tensor's memory.
func (t Tensor) Elements() ([][]byte, error) {
	if t.Datatype != DatatypeBytes {
		return nil, fmt.Errorf("tensor %q is %s, not BYTES", t.Name, t.Datatype)
	}
	n, err := NumElements(t.Shape)
	if err != nil {
		return nil, err
	}
	els, err := splitBytes(t.Data, n)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %v", t.Name, err)
	}
	return els, nil
}

// Strings decodes a BYTES tensor's elements as strings.
func (t Tensor) Strings() ([]string, error) {
	els, err := t.Elements()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(els))
	for i, e := range els {
		out[i] = string(e)
	}
	return out, nil
}

// jsonTensor is the KServe v2 JSON shape of a tensor.
type jsonTensor struct {
	Name     string          `json:"name"`
	Datatype string          `json:"datatype"`
	Shape    []int64         `json:"shape"`
	Data     json.RawMessage `json:"data"`
}

// MarshalJSON writes the KServe v2 shape: data as a flat list of numbers, booleans or strings.
func (t Tensor) MarshalJSON() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('[')
	if t.Datatype == DatatypeBytes {
		n, _ := NumElements(t.Shape)
		els, _ := splitBytes(t.Data, n)
		for i, e := range els {
			if i > 0 {
				b.WriteByte(',')
			}
			s, _ := json.Marshal(string(e))
			b.Write(s)
		}
	} else {
		size := elemSize[t.Datatype]
		var num []byte
		for i := 0; i < len(t.Data); i += size {
			if i > 0 {
				b.WriteByte(',')
			}
			num = appendElem(num[:0], t.Datatype, t.Data[i:i+size])
			b.Write(num)
		}
	}
	b.WriteByte(']')
	shape := t.Shape
	if shape == nil {
		shape = []int64{}
	}
	return json.Marshal(jsonTensor{Name: t.Name, Datatype: t.Datatype, Shape: shape, Data: b.Bytes()})
}

func appendElem(dst []byte, dt string, e []byte) []byte {
	le := binary.LittleEndian
	switch dt {
	case "BOOL":
		return strconv.AppendBool(dst, e[0] != 0)
	case "UINT8":
		return strconv.AppendUint(dst, uint64(e[0]), 10)
	case "UINT16":
		return strconv.AppendUint(dst, uint64(le.Uint16(e)), 10)
	case "UINT32":
		return strconv.AppendUint(dst, uint64(le.Uint32(e)), 10)
	case "UINT64":
		return strconv.AppendUint(dst, le.Uint64(e), 10)
	case "INT8":
		return strconv.AppendInt(dst, int64(int8(e[0])), 10)
	case "INT16":
		return strconv.AppendInt(dst, int64(int16(le.Uint16(e))), 10)
	case "INT32":
		return strconv.AppendInt(dst, int64(int32(le.Uint32(e))), 10)
	case "INT64":
		return strconv.AppendInt(dst, int64(le.Uint64(e)), 10)
	case "FP32":
		f := math.Float32frombits(le.Uint32(e))
		if math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) {
			return append(dst, "null"...)
		}
		return strconv.AppendFloat(dst, float64(f), 'g', -1, 32)
	default: // FP64
		f := math.Float64frombits(le.Uint64(e))
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return append(dst, "null"...)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64)
	}
}

// UnmarshalJSON reads the KServe v2 shape; data may be flat or nested as the shape. BYTES elements are strings,
// taken as they are, or base64 when the tensor's parameters say content_type "base64".
func (t *Tensor) UnmarshalJSON(b []byte) error {
	var in oipInput
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	if in.Parameters.BinaryDataSize != nil {
		return fmt.Errorf("tensor %q: %s, but the data has no binary section (%s)", in.Name, ParamBinaryDataSize,
			HeaderInferenceHeaderLength)
	}
	*t = Tensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape}
	return t.decodeJSONData(in.Data, in.Parameters.ContentType)
}

// decodeJSONData sets t.Data from the JSON data of a tensor whose name, datatype and shape are set.
func (t *Tensor) decodeJSONData(data json.RawMessage, contentType string) error {
	jt := jsonTensor{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape, Data: data}
	n, err := NumElements(jt.Shape)
	if err != nil {
		return fmt.Errorf("tensor %q: %v", jt.Name, err)
	}
	var raw any
	dec := json.NewDecoder(bytes.NewReader(jt.Data))
	dec.UseNumber()
	if len(jt.Data) == 0 {
		return fmt.Errorf("tensor %q: no data", jt.Name)
	}
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("tensor %q: data: %v", jt.Name, err)
	}
	var flat []any
	flatten(raw, &flat)
	if len(flat) != n {
		return fmt.Errorf("tensor %q: %d data elements, want %d for shape %v", jt.Name, len(flat), n, jt.Shape)
	}
	if jt.Datatype == DatatypeBytes && contentType == ContentTypeBase64 {
		t.Data, err = decodeBase64Elements(jt.Name, flat)
		return err
	}
	if jt.Datatype == DatatypeBytes {
		vals := make([][]byte, n)
		for i, v := range flat {
			s, ok := v.(string)
			if !ok {
				return fmt.Errorf("tensor %q: data[%d] is not a string", jt.Name, i)
			}
			vals[i] = []byte(s)
		}
		t.Data = NewBytes("", vals).Data
		return nil
	}
	size, ok := elemSize[jt.Datatype]
	if !ok {
		return fmt.Errorf("tensor %q: unknown datatype %q", jt.Name, jt.Datatype)
	}
	t.Data = make([]byte, n*size)
	for i, v := range flat {
		if err := putElem(t.Data[i*size:(i+1)*size], jt.Datatype, v); err != nil {
			return fmt.Errorf("tensor %q: data[%d]: %v", jt.Name, i, err)
		}
	}
	return nil
}

func flatten(v any, out *[]any) {
	if a, ok := v.([]any); ok {
		for _, e := range a {
			flatten(e, out)
		}
		return
	}
	*out = append(*out, v)
}

func putElem(dst []byte, dt string, v any) error {
	le := binary.LittleEndian
	if dt == "BOOL" {
		bv, ok := v.(bool)
		if !ok {
			return fmt.Errorf("%v is not a boolean", v)
		}
		if bv {
			dst[0] = 1
		}
		return nil
	}
	num, ok := v.(json.Number)
	if !ok {
		return fmt.Errorf("%v is not a number", v)
	}
	switch dt {
	case "FP32", "FP64":
		f, err := num.Float64()
		if err != nil {
			return fmt.Errorf("%s is not a number", num)
		}
		if dt == "FP32" {
			// Out of range is what rounds to infinity: the shortest form of MaxFloat32, 3.4028235e+38 (what
			// MarshalJSON writes), is a little above it as a float64.
			if math.IsInf(float64(float32(f)), 0) {
				return fmt.Errorf("%s is out of range for FP32", num)
			}
			le.PutUint32(dst, math.Float32bits(float32(f)))
		} else {
			le.PutUint64(dst, math.Float64bits(f))
		}
		return nil
	case "UINT8", "UINT16", "UINT32", "UINT64":
		bits := 8 * len(dst)
		u, err := strconv.ParseUint(num.String(), 10, bits)
		if err != nil {
			return fmt.Errorf("%s is not a %s", num, dt)
		}
		putUint(dst, u)
		return nil
	default: // INT8..INT64
		bits := 8 * len(dst)
		i, err := strconv.ParseInt(num.String(), 10, bits)
		if err != nil {
			return fmt.Errorf("%s is not an %s", num, dt)
		}
		putUint(dst, uint64(i))
		return nil
	}
}

func putUint(dst []byte, u uint64) {
	for i := range dst {
		dst[i] = byte(u >> (8 * i))
	}
}

// ValidateTensors checks each of an item's tensors (Validate): what a frontend checks of a request, and a worker of
// every item of a task message, whoever published it, before any of it is read.
func ValidateTensors(ts []Tensor) error {
	for i := range ts {
		if err := ts[i].Validate(); err != nil {
			return fmt.Errorf("inputs[%d]: %v", i, err)
		}
	}
	return nil
}
