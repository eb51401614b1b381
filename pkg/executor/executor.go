// Package executor runs a batch of items through one model variant: the interface every executor kind implements,
// and the table of kinds. A kind lives in a package of its own that registers its constructor when imported
// (executor/emulated, executor/onnxexec; executor/all imports every kind), so a program links only the kinds it
// imports: the simulator runs the emulated executor without linking ONNX Runtime.
package executor

import (
	"context"
	"fmt"
	"slices"
	"sync"

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
	// Confidence is how sure the model is of this answer, in [0, 1], from the kinds that say (a cascade's first
	// variant sends the item on when it is below the plan's threshold: pkg/hop.Table.Escalate).
	Confidence float64
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

// Constructor builds (and loads) the executor of variant v of task.
type Constructor func(spec *pipeline.Spec, task string, v *pipeline.Variant, opts Options) (Executor, error)

var (
	kindsMu sync.RWMutex
	kinds   = map[string]Constructor{}
)

// Register makes New build variants of kind (pipeline.Executor*) with c. A kind's package calls it from init;
// registering a kind twice is a programming error and panics.
func Register(kind string, c Constructor) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if _, dup := kinds[kind]; dup {
		panic("executor: kind " + kind + " registered twice")
	}
	kinds[kind] = c
}

// Kinds lists the registered kinds, sorted.
func Kinds() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	out := make([]string, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// New builds the executor a variant's spec asks for, with the constructor registered for its kind (emulated when
// the spec names none).
func New(spec *pipeline.Spec, task, variant string, opts Options) (Executor, error) {
	v := spec.Variant(task, variant)
	if v == nil {
		return nil, fmt.Errorf("pipeline %s has no variant %s/%s", spec.Name, task, variant)
	}
	kind := v.Executor.Kind
	if kind == "" {
		kind = pipeline.ExecutorEmulated
	}
	kindsMu.RLock()
	c := kinds[kind]
	kindsMu.RUnlock()
	if c == nil {
		return nil, fmt.Errorf("variant %s/%s: executor kind %q is not supported by this program (it has %v)",
			task, variant, kind, Kinds())
	}
	return c(spec, task, v, opts)
}
