package ramsis

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// ModelOf is the decision process of task under plan p: its hosted variants (front); arrivals at the
// task's rate at the plan's demand rounded up to its load level (LoadLevel), with the spec's arrival_cv; and the
// slacks its items may have (slacks). ok false when the choice is no choice (one variant hosted) or nothing is.
func ModelOf(spec *pipeline.Spec, p *plan.Plan, task string) (m Model, opts []routing.QueueOption, ok bool) {
	opts = front(routing.QueueOptions(spec, p, task))
	if len(opts) < 2 {
		return Model{}, nil, false
	}
	rate := TaskRates(spec, p)[task]
	if !(rate > 0) {
		return Model{}, nil, false
	}
	m = Model{Rate: LoadLevel(rate), CV: spec.ArrivalCV, Slacks: slacks(spec, p, task)}
	if m.CV <= 0 {
		m.CV = 1
	}
	for _, o := range opts {
		work := quantize(time.Duration(float64(o.Batch(o.MaxBatch)) / float64(o.Replicas*o.MaxBatch)))
		o := o
		m.Options = append(m.Options, Option{Variant: o.Variant, Accuracy: o.Accuracy, Work: work,
			Completion: func(backlog time.Duration) time.Duration {
				return o.Completion(float64(backlog) / float64(work))
			}})
	}
	return m, opts, true
}

// quantize rounds a time to a level 2% apart: the plans' measured profiles move by less from plan to plan, and a
// policy is computed once per level (the cache's key holds it).
func quantize(d time.Duration) time.Duration {
	return time.Duration(math.Pow(1.02, math.Round(math.Log(float64(d))/math.Log(1.02))))
}

// front is the options (most accurate first) the policy chooses among: at most maxOptions, the most accurate and the
// one with the least work per item. Unlike RAMSIS's models, which share one worker, no variant dominates another:
// each has replicas of its own, and a less accurate and slower one still adds capacity.
func front(opts []routing.QueueOption) []routing.QueueOption {
	if len(opts) <= maxOptions {
		return opts
	}
	fastest := opts[0]
	for _, o := range opts[1:] {
		if perItem(o) < perItem(fastest) {
			fastest = o
		}
	}
	out := slices.Clone(opts[:maxOptions-1])
	if !slices.ContainsFunc(out, func(o routing.QueueOption) bool { return o.Variant == fastest.Variant }) {
		return append(out, fastest)
	}
	return append(out, opts[maxOptions-1])
}

func perItem(o routing.QueueOption) float64 {
	return float64(o.Batch(o.MaxBatch)) / float64(o.Replicas*o.MaxBatch)
}

// LoadLevel rounds a rate up to its load level: levels 10% apart, so that a plan for a little more or less demand
// reuses the policy of its level (RAMSIS keeps one policy per load level).
func LoadLevel(rate float64) float64 {
	return math.Pow(1.1, math.Ceil(math.Log(rate)/math.Log(1.1)-1e-9))
}

// TaskRates are the items per second each task receives under plan p at its planned demand (the allocation's, or
// for a static plan its root variants' capacity): the demand follows the routing tables down, times each
// variant's fan-out to each child.
func TaskRates(spec *pipeline.Spec, p *plan.Plan) map[string]float64 {
	demand := 0.0
	if p.Allocation != nil {
		demand = p.Allocation.DemandQPS
	}
	root := spec.Root()
	if demand <= 0 {
		for _, vp := range p.Variants {
			if vp.Task == root.Name {
				demand += vp.CapacityQPS
			}
		}
	}
	incoming := map[string]float64{} // task/variant -> items per second
	for _, r := range p.Routing.Root {
		incoming[wire.VariantKey{Task: root.Name, Variant: r.Variant}.String()] += demand * r.Prob
	}
	rates := map[string]float64{}
	order := []*pipeline.Task{root}
	for len(order) > 0 {
		t := order[0]
		order = order[1:]
		for vi := range t.Variants {
			v := &t.Variants[vi]
			in := incoming[wire.VariantKey{Task: t.Name, Variant: v.Name}.String()]
			rates[t.Name] += in
			if in == 0 {
				continue
			}
			down := p.Routing.Downstream[wire.VariantKey{Task: t.Name, Variant: v.Name}.String()]
			for _, c := range t.Children {
				out := in * t.FanoutTo(v, c, p.Fanout)
				for _, r := range down[c] {
					incoming[wire.VariantKey{Task: c, Variant: r.Variant}.String()] += out * r.Prob
				}
			}
		}
		for _, c := range t.Children {
			if ct := spec.Task(c); ct != nil && !slices.Contains(order, ct) {
				order = append(order, ct)
			}
		}
	}
	return rates
}

// slackPoints is how many slacks a child task's items are assumed to have, equally spread.
const slackPoints = 6

// slacks are the times task's items have for it (to the deadline less what the tasks below are allotted, as the
// hop step computes it): at the root, the SLO less the rest below; below, anything from the task's own allotment
// (the tasks above took all of theirs) to the SLO less the rest below (they took none), equally likely.
func slacks(spec *pipeline.Spec, p *plan.Plan, task string) []time.Duration {
	slo := time.Duration(spec.SLOMs * float64(time.Millisecond))
	hi := slo - deadline.RestBelow(spec, p, task)
	if task == spec.Root().Name {
		return []time.Duration{max(hi, time.Millisecond)}
	}
	lo := hi
	for _, t := range spec.Tasks {
		if slices.Contains(t.Children, task) {
			lo = min(lo, deadline.RestBelow(spec, p, t.Name)-deadline.RestBelow(spec, p, task))
		}
	}
	hi = max(hi, time.Millisecond)
	lo = min(max(lo, hi/slackPoints), hi)
	out := make([]time.Duration, slackPoints)
	for i := range out {
		out[i] = lo + (hi-lo)*time.Duration(i)/time.Duration(slackPoints-1)
	}
	return out
}

// Choice is a task's policy with the options it chooses among (aligned with Policy.Options).
type Choice struct {
	Policy  *Policy
	Options []routing.QueueOption
	// Fresh says the policy was computed for this call (not from the cache).
	Fresh bool
}

// cache holds the policies computed, by model: a plan change recomputes only the tasks whose hosted variants,
// load level or slacks changed. Policies are read-only once solved, so callers share them.
var cache = struct {
	sync.Mutex
	policies map[string]*Policy
	last     map[string][]float64 // by task and options: the values of its last policy (Model.Start)
	solved   int
	elapsed  time.Duration
}{policies: map[string]*Policy{}, last: map[string][]float64{}}

// cacheSize bounds the cache (cleared when full: plans change a few times a minute at most).
const cacheSize = 256

// For is task's policy under plan p, from the cache or solved now (now: the caller's clock, for the time it took);
// nil when there is no choice to make. Called when a plan is applied, never per item.
func For(spec *pipeline.Spec, p *plan.Plan, task string, now func() time.Time) (*Choice, error) {
	m, opts, ok := ModelOf(spec, p, task)
	if !ok {
		return nil, nil
	}
	key := spec.Name + "/" + task + "/" + m.key(opts)
	cache.Lock()
	defer cache.Unlock()
	if pol, ok := cache.policies[key]; ok {
		return &Choice{Policy: pol, Options: opts}, nil
	}
	family := spec.Name + "/" + task
	for _, o := range opts {
		family += "/" + o.Variant
	}
	m.Start = cache.last[family]
	pol, err := Solve(m, now)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", task, err)
	}
	if len(cache.policies) >= cacheSize {
		clear(cache.policies)
		clear(cache.last)
	}
	cache.last[family] = pol.Values
	cache.policies[key] = pol
	cache.solved++
	cache.elapsed += pol.Elapsed
	return &Choice{Policy: pol, Options: opts, Fresh: true}, nil
}

// Solved is how many policies For has computed in this process, and the time they took in all.
func Solved() (n int, elapsed time.Duration) {
	cache.Lock()
	defer cache.Unlock()
	return cache.solved, cache.elapsed
}

// key names a model: what its policy depends on.
func (m Model) key(opts []routing.QueueOption) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%g/%g/%d/%g", m.Rate, m.CV, m.Cells, m.Miss)
	for i, o := range opts {
		fmt.Fprintf(&b, "|%s:%g:%d:%d:%d", o.Variant, o.Accuracy, o.Replicas, o.MaxBatch, m.Options[i].Work)
		for d := range 4 { // the completion's shape, sampled, to the millisecond
			fmt.Fprintf(&b, ":%d", m.Options[i].Completion(time.Duration(d)*100*time.Millisecond).Milliseconds())
		}
	}
	for _, s := range m.Slacks {
		fmt.Fprintf(&b, "|%d", s.Milliseconds())
	}
	return b.String()
}

// Choose is the variant of task the policy sends an item with slack to, from the queues q (depths in items, turned
// into backlogs in scratch, one per option): "", false when a queue is not known (the caller follows its tables).
// The hop step chooses its children's variants with it, the frontend the root's.
func (ch *Choice) Choose(q routing.Depths, task string, slack time.Duration, scratch []time.Duration) (string, bool) {
	for i, o := range ch.Options {
		d, ok := q.Depth(task, o.Variant)
		if !ok {
			return "", false
		}
		scratch[i] = time.Duration(d * float64(ch.Policy.Options[i].Work))
	}
	return ch.Options[ch.Policy.Choose(scratch[:len(ch.Options)], slack)].Variant, true
}
