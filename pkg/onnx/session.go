package onnx

import (
	"fmt"

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

// Run feeds data, of the given shape, to the model's input and returns every output. The returned slices are the
// caller's (copied out of ONNX Runtime's memory).
func (s *Session) Run(shape []int64, data []float32) ([]Output, error) {
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
	return res, nil
}

// Close releases the model.
func (s *Session) Close() error {
	if s.session == nil {
		return nil
	}
	err := s.session.Destroy()
	s.session = nil
	return err
}
