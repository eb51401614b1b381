package onnx

import (
	"fmt"
	"slices"
	"strconv"

	ort "github.com/yalue/onnxruntime_go"
)

// Session is one loaded model with one float32 input and float32 outputs, which is what the models Sleipnir serves
// take. Run is safe for one goroutine at a time.
type Session struct {
	path    string
	input   string
	inShape []int64
	outputs []string
	session *ort.DynamicAdvancedSession
	bound   map[string]*binding // by input shape
	order   []string            // keys of bound, oldest first
	key     []byte              // scratch for the key of a run's shape
	scratch []float32           // Input's buffer for a shape not kept
}

// SessionOptions tune a session.
type SessionOptions struct {
	// IntraOpThreads is the number of threads one inference uses (0: ONNX Runtime's default, one per core). Several
	// workers on one machine should use 1 each, or they fight over the cores.
	IntraOpThreads int
}

// Open loads the model at path. Init must have been called.
func Open(path string, opts SessionOptions) (*Session, error) {
	if !ort.IsInitialized() {
		return nil, fmt.Errorf("open %s: ONNX Runtime is not initialised (call onnx.Init)", path)
	}
	ins, outs, err := ort.GetInputOutputInfo(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if len(ins) != 1 || ins[0].DataType != ort.TensorElementDataTypeFloat {
		return nil, fmt.Errorf("open %s: want one float32 input, the model has %d inputs (%v)", path, len(ins), ins)
	}
	s := &Session{path: path, input: ins[0].Name, inShape: append([]int64(nil), ins[0].Dimensions...)}
	for _, o := range outs {
		if o.DataType != ort.TensorElementDataTypeFloat {
			return nil, fmt.Errorf("open %s: output %s is %v, want float32", path, o.Name, o.DataType)
		}
		s.outputs = append(s.outputs, o.Name)
	}
	so, err := ort.NewSessionOptions()
	if err != nil {
		return nil, err
	}
	defer so.Destroy()
	if opts.IntraOpThreads > 0 {
		if err := so.SetIntraOpNumThreads(opts.IntraOpThreads); err != nil {
			return nil, err
		}
		// One inference at a time per session: inter-op parallelism would only add threads.
		if err := so.SetInterOpNumThreads(1); err != nil {
			return nil, err
		}
	}
	s.session, err = ort.NewDynamicAdvancedSession(path, []string{s.input}, s.outputs, so)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return s, nil
}

// InputShape is the model's input shape; -1 marks a dimension of any size (the batch, usually).
func (s *Session) InputShape() []int64 { return append([]int64(nil), s.inShape...) }

// Output is one output of a run: its shape and its elements in row-major order.
type Output struct {
	Name  string
	Shape []int64
	Data  []float32
}

// Input is a buffer of shape's size to fill with a run's input and pass to Run: the input tensor of that shape when
// one is kept, so the run copies nothing in. It is valid until the next Input, Run or Close.
func (s *Session) Input(shape []int64) []float32 {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	s.key = shapeKey(s.key[:0], shape)
	if b := s.bound[string(s.key)]; b != nil && len(b.in.GetData()) == n {
		return b.in.GetData()
	}
	s.scratch = slices.Grow(s.scratch[:0], n)[:n]
	return s.scratch
}

// Run feeds data, of the given shape, to the model's input and returns every output. The outputs' Data may be the
// session's own memory: read or copy them before the next Run or Close.
//
// The input and output tensors of the last few input shapes are kept and reused: a batch of a shape seen before
// allocates nothing and copies nothing out, and nothing in either when data came from Input.
func (s *Session) Run(shape []int64, data []float32) ([]Output, error) {
	s.key = shapeKey(s.key[:0], shape)
	if b := s.bound[string(s.key)]; b != nil { // string(bytes) in a map index does not allocate
		in := b.in.GetData()
		if len(data) != len(in) {
			return nil, fmt.Errorf("%s: %d input elements for shape %v, want %d", s.path, len(data), shape, len(in))
		}
		if len(in) > 0 && &in[0] != &data[0] {
			copy(in, data)
		}
		if err := s.session.Run([]ort.Value{b.in}, b.values); err == nil {
			res := make([]Output, len(b.outs))
			for i, t := range b.outs {
				res[i] = Output{Name: s.outputs[i], Shape: b.shapes[i], Data: t.GetData()}
			}
			return res, nil
		}
		// Outputs of another shape than last time: forget the binding and let ONNX Runtime allocate.
		s.unbind(string(s.key))
	}
	in, err := ort.NewTensor(ort.NewShape(shape...), data)
	if err != nil {
		return nil, fmt.Errorf("%s: input: %w", s.path, err)
	}
	defer in.Destroy()
	outs := make([]ort.Value, len(s.outputs)) // nil: ONNX Runtime allocates them
	if err := s.session.Run([]ort.Value{in}, outs); err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	res := make([]Output, len(outs))
	for i, v := range outs {
		t, ok := v.(*ort.Tensor[float32])
		if !ok {
			for _, v := range outs {
				v.Destroy()
			}
			return nil, fmt.Errorf("%s: output %s is %T, want a float32 tensor", s.path, s.outputs[i], v)
		}
		res[i] = Output{Name: s.outputs[i], Shape: append([]int64(nil), t.GetShape()...), Data: append([]float32(nil), t.GetData()...)}
		t.Destroy()
	}
	s.bind(string(s.key), shape, res)
	return res, nil
}

// shapeKey appends the key of a shape in bound: its dimensions, comma-separated.
func shapeKey(dst []byte, shape []int64) []byte {
	for i, d := range shape {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, d, 10)
	}
	return dst
}

// binding is the reusable input and output tensors of one input shape.
type binding struct {
	in     *ort.Tensor[float32]
	outs   []*ort.Tensor[float32]
	values []ort.Value
	shapes [][]int64
}

// maxBindings bounds the shapes kept: a variant runs a few batch sizes, and a recogniser's width varies.
const maxBindings = 8

func (s *Session) bind(key string, shape []int64, res []Output) {
	if s.bound == nil {
		s.bound = map[string]*binding{}
	}
	if len(s.order) >= maxBindings {
		s.unbind(s.order[0])
	}
	in, err := ort.NewEmptyTensor[float32](ort.NewShape(shape...))
	if err != nil {
		return
	}
	b := &binding{in: in}
	for _, o := range res {
		t, err := ort.NewEmptyTensor[float32](ort.NewShape(o.Shape...))
		if err != nil {
			b.destroy()
			return
		}
		b.outs, b.values, b.shapes = append(b.outs, t), append(b.values, t), append(b.shapes, o.Shape)
	}
	s.bound[key] = b
	s.order = append(s.order, key)
}

func (s *Session) unbind(key string) {
	if b := s.bound[key]; b != nil {
		b.destroy()
		delete(s.bound, key)
		s.order = slices.DeleteFunc(s.order, func(k string) bool { return k == key })
	}
}

func (b *binding) destroy() {
	b.in.Destroy()
	for _, t := range b.outs {
		t.Destroy()
	}
}

// Close releases the model.
func (s *Session) Close() error {
	if s.session == nil {
		return nil
	}
	for len(s.order) > 0 {
		s.unbind(s.order[0])
	}
	err := s.session.Destroy()
	s.session = nil
	return err
}
