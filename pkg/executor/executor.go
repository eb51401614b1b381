// Package executor runs a batch of items through one model variant. The emulated executor sleeps for the variant's
// profiled latency and emits its profiled fan-out; real executors (ONNX) implement the same interface.
package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/onnx"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Input is one item of a batch.
type Input struct {
	RequestID string
	ItemID    string
	Tensors   []wire.Tensor
}

// Output is what one item produced: its own result, and the inputs of the sub-requests it emits, per child task.
type Output struct {
	Tensors  []wire.Tensor
	Children map[string][][]wire.Tensor
	// Err fails this item alone (its input was unusable); the rest of the batch stands.
	Err error
}

// NumChildren is the number of sub-requests the item emits over all child tasks.
func (o Output) NumChildren() int {
	n := 0
	for _, c := range o.Children {
		n += len(c)
	}
	return n
}

// Executor runs batches of one variant. Execute is called from one goroutine at a time.
type Executor interface {
	// Execute returns one Output per input, in order.
	Execute(ctx context.Context, batch []Input) ([]Output, error)
	Close() error
}

// Options are the knobs shared by every executor kind.
type Options struct {
	// Seed makes emulated latency jitter and fan-out reproducible.
	Seed uint64
	// ModelsDir is where onnx variants' model files are, and the ONNX Runtime library unless
	// $SLEIPNIR_ONNXRUNTIME_LIB says otherwise (default: onnx.ModelsDir()).
	ModelsDir string
}

// New builds the executor a variant's spec asks for.
func New(spec *pipeline.Spec, task, variant string, opts Options) (Executor, error) {
	v := spec.Variant(task, variant)
	if v == nil {
		return nil, fmt.Errorf("pipeline %s has no variant %s/%s", spec.Name, task, variant)
	}
	switch v.Executor.Kind {
	case pipeline.ExecutorEmulated, "":
		time.Sleep(time.Duration(v.SwapMs * float64(time.Millisecond))) // loading the model
		return NewEmulated(spec, task, v, opts.Seed), nil
	case pipeline.ExecutorONNX:
		dir := opts.ModelsDir
		if dir == "" {
			dir = onnx.ModelsDir()
		}
		return NewONNX(spec, task, v, dir)
	default:
		return nil, fmt.Errorf("variant %s/%s: executor kind %q is not supported", task, variant, v.Executor.Kind)
	}
}
