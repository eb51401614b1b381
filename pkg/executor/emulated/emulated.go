// Package emulated is the executor kind "emulated": it stands in for a model by its profile, so that pipelines can be
// served and simulated without the models. Importing it registers the kind.
package emulated

import (
	"context"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/variate"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func init() {
	executor.Register(pipeline.ExecutorEmulated, func(spec *pipeline.Spec, task string, v *pipeline.Variant,
		opts executor.Options) (executor.Executor, error) {
		time.Sleep(time.Duration(v.SwapMs * float64(time.Millisecond))) // loading the model
		return New(spec, task, v, opts.Seed), nil
	})
}

// Executor stands in for a model: a batch takes the profiled p50 latency of its size, with log-normal jitter whose
// 95th percentile is the profiled p95, and sleeps (never spins) so that many emulated servers share a small machine.
// A sleep ends late (the timer's slack, and on a machine shared by many emulated servers, the wait for a CPU to run
// on); the executor keeps the average of that lateness and sleeps that much less, so that its batches take their
// profiled latency as measured by the worker around Execute: an emulated server stands in for a machine of its own,
// and the planner's measured latencies (pkg/latency) must see the profile, not the emulation's crowding.
// Each item emits a seeded number of sub-requests with the profiled mean, split across child tasks by the profiled
// shares. The fan-out of an item depends only on the seed and the item's identity, so a batch executed again after
// a redelivery emits the same sub-requests.
type Executor struct {
	variant  *pipeline.Variant
	seed     uint64
	jitter   *rand.Rand
	children []string  // child tasks, sorted
	shared   []int     // the children the fan-out's shares split over (indexes in children)
	shares   []float64 // cumulative shares, aligned with shared
	parallel []int     // the children every item goes to (indexes in children)
	branches []*pipeline.Fanout
	sleep    func(ctx context.Context, d time.Duration) error
	now      func() time.Time
	// late is the moving average of how much later than asked a sleep ended (lateAlpha: the newest's weight).
	late time.Duration
	// sigmas are the log-normal jitter's sigma per profile point (0: none), worked out once, not per batch
	sigmas []float64
	fanout variate.Count // the shared fan-out's distribution (SubRequests)
}

// lateAlpha is the weight of the newest sleep's lateness in the executor's average: about the last ten batches.
const lateAlpha = 0.1

// New returns the emulated executor of variant v of task.
func New(spec *pipeline.Spec, task string, v *pipeline.Variant, seed uint64) *Executor {
	e := &Executor{variant: v, seed: seed, jitter: rand.New(rand.NewPCG(seed, 0x51e1)), sleep: sleepCtx, now: time.Now}
	e.sigmas = make([]float64, len(v.Profile))
	for i, p := range v.Profile {
		if p.P95Ms > p.P50Ms {
			e.sigmas[i] = math.Log(p.P95Ms/p.P50Ms) / 1.6448536269514722
		}
	}
	if v.Fanout != nil {
		e.fanout = countOf(v.Fanout)
	}
	t := spec.Task(task)
	if t == nil || len(t.Children) == 0 {
		return e
	}
	e.children = append([]string(nil), t.Children...)
	sort.Strings(e.children)
	acc := 0.0
	for c, child := range e.children {
		if t.IsParallel(child) {
			e.parallel = append(e.parallel, c)
			e.branches = append(e.branches, t.BranchOf(v, child))
		} else if v.Fanout != nil {
			acc += v.Fanout.Shares[child]
			e.shared = append(e.shared, c)
			e.shares = append(e.shares, acc)
		}
	}
	return e
}

// Latency draws the duration of one batch of n items.
func (e *Executor) Latency(n int) time.Duration {
	prof, i := e.variant.Profile, e.variant.PointFor(n)
	ms := prof[i].P50Ms
	if prof[i].P95Ms > prof[i].P50Ms {
		ms = prof[i].P50Ms * math.Exp(e.sigmas[i]*e.jitter.NormFloat64())
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// Execute sleeps for one batch and returns each item's result and sub-requests.
func (e *Executor) Execute(ctx context.Context, batch []executor.Input) ([]executor.Output, error) {
	if err := e.sleepFor(ctx, e.Latency(len(batch))); err != nil {
		return nil, err
	}
	out := make([]executor.Output, len(batch))
	for i, in := range batch {
		out[i] = e.output(in)
	}
	return out, nil
}

func (e *Executor) output(in executor.Input) executor.Output {
	rng := rand.New(rand.NewPCG(e.seed, itemHash(in.RequestID, in.ItemID)))
	o := executor.Output{Tensors: []wire.Tensor{wire.NewFP32("score", []int64{1}, []float32{float32(rng.Float64())})}}
	if e.variant.Confidence != nil {
		o.Confidence = e.Confidence(rng)
	}
	if len(e.children) == 0 {
		return o
	}
	emit := func(c int) {
		if o.Children == nil {
			o.Children = make(map[string][][]wire.Tensor, len(e.children))
		}
		// A crop box, as a detector would pass on: x, y, w, h in [0, 1).
		crop := wire.NewFP32("crop", []int64{1, 4}, []float32{
			float32(rng.Float64()), float32(rng.Float64()), float32(rng.Float64()), float32(rng.Float64())})
		o.Children[e.children[c]] = append(o.Children[e.children[c]], []wire.Tensor{crop})
	}
	for i, c := range e.parallel {
		for range e.Copies(rng, i) {
			emit(c)
		}
	}
	for range e.SubRequests(rng) {
		emit(e.ChildOf(rng.Float64()))
	}
	return o
}

// DrawsConfidence says the variant has a confidence distribution to draw from (pipeline.Confidence); without one,
// Confidence answers 1.
func (e *Executor) DrawsConfidence() bool { return e.variant.Confidence != nil }

// Confidence draws the confidence of one answer (Answer).
func (e *Executor) Confidence(rng *rand.Rand) float64 {
	c, _ := e.Answer(rng)
	return c
}

// Answer draws one answer: right with the variant's accuracy, and its confidence from the variant's distribution
// for right or wrong answers (pipeline.Confidence); confidence 1 and no draw for a variant that has none.
func (e *Executor) Answer(rng *rand.Rand) (confidence float64, right bool) {
	c := e.variant.Confidence
	if c == nil {
		return 1, true
	}
	d := c.Wrong
	if right = rng.Float64() < e.variant.Accuracy; right {
		d = c.Right
	}
	return d.Draw(rng.NormFloat64()), right
}

// Children are the child tasks the variant's sub-requests go to, in the order ChildOf and Parallel number them.
func (e *Executor) Children() []string { return e.children }

// ChildOf is the index in Children of the child task a sub-request of the shared fan-out (SubRequests) drawn with
// u in [0, 1) goes to, by the profiled shares.
func (e *Executor) ChildOf(u float64) int {
	return e.shared[min(sort.SearchFloat64s(e.shares, u), len(e.shared)-1)]
}

// Parallel are the indexes in Children of the parallel children, which every item goes to (Copies of it each).
func (e *Executor) Parallel() []int { return e.parallel }

// Copies draws how many sub-requests one item sends to the i-th parallel child (Parallel()[i]): one, unless the
// variant gives that branch a fan-out of its own.
func (e *Executor) Copies(rng *rand.Rand, i int) int { return draw(rng, e.branches[i]) }

// SubRequests draws the number of sub-requests of one item that the fan-out's shares split over the children that
// are not parallel (0 at a leaf task, or when every child is parallel).
func (e *Executor) SubRequests(rng *rand.Rand) int {
	if len(e.shared) == 0 {
		return 0
	}
	return e.fanout.Draw(rng)
}

// draw is a count from fan-out f's distribution.
func draw(rng *rand.Rand, f *pipeline.Fanout) int { return countOf(f).Draw(rng) }

// countOf is fan-out f's distribution.
func countOf(f *pipeline.Fanout) variate.Count {
	switch f.Distribution {
	case pipeline.FanoutFixed:
		return variate.Fixed(int(math.Round(f.Mean)))
	case pipeline.FanoutNegativeBinomial:
		return variate.NegativeBinomialCount(f.Mean, f.Dispersion)
	}
	return variate.PoissonCount(f.Mean)
}

func itemHash(requestID, itemID string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(requestID))
	h.Write([]byte{0})
	h.Write([]byte(itemID))
	return h.Sum64()
}

// sleepFor sleeps so that the batch takes d on average: d less the average lateness of the executor's sleeps.
func (e *Executor) sleepFor(ctx context.Context, d time.Duration) error {
	ask := max(0, d-e.late)
	start := e.now()
	if err := e.sleep(ctx, ask); err != nil {
		return err
	}
	late := e.now().Sub(start) - ask
	e.late += time.Duration(lateAlpha * float64(late-e.late))
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close releases nothing: the emulated executor holds no resources.
func (e *Executor) Close() error { return nil }
