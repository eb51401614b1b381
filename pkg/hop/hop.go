// Package hop is the step after a batch executes, written once for the live worker (services/worker) and the
// simulator (pkg/sim): each executed item's sub-requests are routed (the routing table, then the deadline policy),
// grouped per destination variant and split into task messages the destination's replicas can share, and what is
// routed nowhere becomes a dropped leaf. Pure: time and randomness are passed in; what a message carries beyond
// numbers (tensors, headers) is the caller's.
package hop

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ramsis"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Dest is what the split knows of a destination variant under a plan: its replicas, its max batch, and its
// profile (for the latency of a message's items).
type Dest struct {
	Replicas, MaxBatch int
	Variant            *pipeline.Variant
}

// Table is one variant's forwarding under one plan: its child tasks, in the order its sub-requests are numbered,
// their routes, the deadline stage that decides per sub-request, and the sizes of the hosted destinations.
type Table struct {
	Children []string
	Stage    *deadline.Stage
	// Queues, when the spec's routing_mode is queue, is the queues' measured state the choice reads (the caller's;
	// nil: the tables alone).
	Queues routing.Queues
	routes [][]plan.Route          // aligned with Children
	dests  [][]namedDest           // per child: its hosted variants' sizes, found by a scan (a child has a few)
	stage  []int                   // per child: its index in Stage (deadline.Stage.ChildIndex)
	queue  [][]routing.QueueOption // per child, with routing_mode queue: its hosted variants, most accurate first
	policy []*ramsis.Choice        // per child, with routing_mode ramsis (UsePolicies): its policy, nil no choice
	ramsis bool                    // routing_mode ramsis
	esc    *escalation             // nil: no cascade from this variant (cascade.go)
}

// namedDest is a hosted variant's Dest, by the variant's name.
type namedDest struct {
	variant string
	Dest
}

// dest is the Dest of child c's variant (zero when it is not hosted: one message).
func (t *Table) dest(c int, variant string) Dest {
	for _, d := range t.dests[c] {
		if d.variant == variant {
			return d.Dest
		}
	}
	return Dest{}
}

// ForReplica is the forwarding table of one replica of task/variant under plan p, with the replica's own deadline
// stage (Table.Stage), budget being the variant's profiled time at its max batch: each worker decides for itself,
// its share of the backups' spare capacity one replica's, and each of the simulator's servers builds its own with
// this same call.
func ForReplica(spec *pipeline.Spec, p *plan.Plan, policy deadline.Policy, task, variant string, budget time.Duration,
	children []string) *Table {
	return NewTable(spec, p, deadline.NewStage(spec, p, policy, task, variant, budget, 1), task, variant, children)
}

// NewTable builds the forwarding of task/variant under plan p (nil before the first plan: nothing is routed) with
// its deadline stage. children are the task's child tasks in the order the caller numbers sub-requests.
func NewTable(spec *pipeline.Spec, p *plan.Plan, stage *deadline.Stage, task, variant string,
	children []string) *Table {
	t := &Table{Children: children, Stage: stage, routes: make([][]plan.Route, len(children)),
		dests: make([][]namedDest, len(children)), stage: make([]int, len(children))}
	for c, child := range children {
		t.stage[c] = -1
		if stage != nil {
			t.stage[c] = stage.ChildIndex(child)
		}
	}
	if p == nil {
		return t
	}
	t.esc = newEscalation(spec, p, task, variant)
	down := p.Routing.Downstream[wire.VariantKey{Task: task, Variant: variant}.String()]
	if routing.ReadsQueues(spec.RoutingMode) {
		t.queue = make([][]routing.QueueOption, len(children))
	}
	t.ramsis = spec.RoutingMode == routing.ModeRAMSIS
	for c, child := range children {
		t.routes[c] = down[child]
		if t.queue != nil {
			t.queue[c] = routing.QueueOptions(spec, p, child)
		}
		for _, vp := range p.Variants {
			if vp.Task == child {
				t.dests[c] = setDest(t.dests[c], namedDest{vp.Variant, Dest{Replicas: vp.Replicas,
					MaxBatch: vp.MaxBatch, Variant: spec.Variant(child, vp.Variant)}})
			}
		}
	}
	return t
}

// setDest adds d to ds, in place of one of the same variant (as a map's assignment did).
func setDest(ds []namedDest, d namedDest) []namedDest {
	for i := range ds {
		if ds[i].variant == d.variant {
			ds[i] = d
			return ds
		}
	}
	return append(ds, d)
}

// Item is one executed item that emits sub-requests: its weight's denominator (wire.Item.Den) and the child task of
// each sub-request, as an index in Table.Children, in the order they are numbered (wire.ChildItemID).
type Item struct {
	Den      uint64
	Children []int
}

// When is the time an item's routing is decided at: now (Unix nanoseconds, as deadline.Stage takes it), the time
// the item spent at the task, and the time left to its deadline.
type When struct {
	Now          int64
	AtTask, Left time.Duration
}

// Message is one task message to send: the sub-requests it carries (their numbers), to child task Children[Child]'s
// variant Variant; Parts is how many messages the parent sends to that variant (1: the id needs no part name).
type Message struct {
	Child   int
	Variant string
	Subs    []int
	Parts   int
}

// Drop is a sub-request the routing or the deadline policy sent nowhere: a leaf, dropped for Reason, or, when
// Degraded (policy degrade), answered with the parent's result for it.
type Drop struct {
	Sub      int
	Reason   string
	Degraded bool
}

// Out is what one item's step produced. Its slices belong to the Stepper and are reused by its next Step.
type Out struct {
	// Den is each sub-request's weight denominator: the parent's times its number of sub-requests, so that the
	// weights of the parent's sub-requests sum to exactly the parent's.
	Den      uint64
	Messages []Message
	Drops    []Drop
	// Rerouted counts the sub-requests the deadline policy sent to a backup variant.
	Rerouted int
}

// ErrWeightOverflow is a fan-out so deep that a sub-request's weight denominator overflows: the parent ends as a
// failed leaf.
var ErrWeightOverflow = errors.New("fan-out too deep: item weight overflows")

// Stepper runs steps with reusable scratch: one per goroutine.
type Stepper struct {
	out    Out
	group  []int // per sub-request: its destination's index in groups, -1 dropped
	groups []group
	subs   []int // the sub-requests, grouped by destination
	sizes  []int // one group's message sizes
	one    [1]plan.Route
	// chosen is what the steps sent since the queues' reading (routing.Queues.Reading) with routing_mode queue:
	// the reading does not hold it yet. Counted per step only, a batch's items (live, every item until the next
	// reading) all saw the same short queue and joined it: on Gamma arrivals at 900 QPS, half again the tables'
	// violations (docs/queue-routing.md).
	chosen  []chosen
	reading uint64
	backlog [4]time.Duration // a ramsis choice's backlogs, per option
}

// chosen counts the sub-requests sent to task/variant since the reading.
type chosen struct {
	task, variant string
	n             float64
}

// sync starts counting afresh when t's queues were read again since the last step.
func (st *Stepper) sync(t *Table) {
	if t.queue == nil || t.Queues == nil {
		return
	}
	if r := t.Queues.Reading(); r != st.reading {
		st.chosen, st.reading = st.chosen[:0], r
	}
}

// sent counts a sub-request sent to task/variant since the reading.
func (st *Stepper) sent(task, variant string) {
	i := 0
	for i < len(st.chosen) && (st.chosen[i].task != task || st.chosen[i].variant != variant) {
		i++
	}
	if i == len(st.chosen) {
		st.chosen = append(st.chosen, chosen{task: task, variant: variant})
	}
	st.chosen[i].n++
}

// depth is the measured queue of child task c's variant, with what was sent there since the reading.
func (st *Stepper) depth(t *Table, c int, variant string) (float64, bool) {
	task := t.Children[c]
	d, ok := t.Queues.Depth(task, variant)
	for _, ch := range st.chosen {
		if ch.task == task && ch.variant == variant {
			d += ch.n
		}
	}
	return d, ok
}

// stepQueues is the queues as one step sees them (Stepper.depth) for child task c.
type stepQueues struct {
	st *Stepper
	t  *Table
	c  int
}

func (q stepQueues) Depth(_, variant string) (float64, bool) { return q.st.depth(q.t, q.c, variant) }

// routes is where a sub-request of child task c goes by the table, or, with routing_mode queue and the queues known,
// to the variant ChooseByQueue picks for the time left less what the tasks below are allotted.
func (st *Stepper) routes(t *Table, c int, left time.Duration) []plan.Route {
	if t.queue == nil || t.Queues == nil {
		return t.routes[c]
	}
	child := t.Children[c]
	var v string
	var ok bool
	if t.ramsis {
		if t.policy != nil { // nil until the caller gives the policies (UsePolicies): the tables decide
			v, ok = st.byPolicy(t.policy[c], stepQueues{st, t, c}, child, left-t.Stage.Rest(child))
		}
	} else {
		v, ok = routing.ChooseByQueue(child, t.queue[c], stepQueues{st, t, c}, left-t.Stage.Rest(child))
	}
	if !ok {
		return t.routes[c]
	}
	st.one[0] = plan.Route{Variant: v, Prob: 1}
	return st.one[:]
}

type group struct {
	child   int
	variant string
	n, at   int // its size, and where its sub-requests start in subs
	fill    int // where the next of them goes
}

// Step routes item's sub-requests at w, drawing from rng (two draws each), groups them per destination variant in
// the order each destination is first drawn, and splits each group into messages (Split). An item without
// sub-requests yields nothing: it is a leaf for the caller to report.
func (st *Stepper) Step(t *Table, item Item, w When, rng *rand.Rand) (*Out, error) {
	out := &st.out
	out.Messages, out.Drops, out.Rerouted = out.Messages[:0], out.Drops[:0], 0
	k := len(item.Children)
	if k == 0 {
		out.Den = item.Den
		return out, nil
	}
	out.Den = item.Den * uint64(k)
	if out.Den/uint64(k) != item.Den {
		return nil, ErrWeightOverflow
	}
	st.group, st.groups = st.group[:0], st.groups[:0]
	st.sync(t)
	for n, c := range item.Children {
		u1, u2 := rng.Float64(), rng.Float64()
		d := t.Stage.RouteAt(t.stage[c], st.routes(t, c, w.Left), w.Now, w.AtTask, w.Left, u1, u2)
		if d.Rerouted {
			out.Rerouted++
		}
		if d.Variant == "" {
			out.Drops = append(out.Drops, Drop{Sub: n, Reason: d.Reason, Degraded: d.Degraded})
			st.group = append(st.group, -1)
			continue
		}
		if t.queue != nil && t.Queues != nil {
			st.sent(t.Children[c], d.Variant)
		}
		g := 0
		for g < len(st.groups) && (st.groups[g].child != c || st.groups[g].variant != d.Variant) {
			g++
		}
		if g == len(st.groups) {
			st.groups = append(st.groups, group{child: c, variant: d.Variant})
		}
		st.groups[g].n++
		st.group = append(st.group, g)
	}
	// Each group's sub-requests, in numbering order, contiguous in subs.
	at := 0
	for g := range st.groups {
		st.groups[g].at, st.groups[g].fill = at, at
		at += st.groups[g].n
	}
	if cap(st.subs) < at {
		st.subs = make([]int, at)
	}
	st.subs = st.subs[:at]
	for n, g := range st.group {
		if g >= 0 {
			st.subs[st.groups[g].fill] = n
			st.groups[g].fill++
		}
	}
	for _, g := range st.groups {
		subs := st.subs[g.at : g.at+g.n]
		st.sizes = Split(st.sizes[:0], g.n, t.dest(g.child, g.variant))
		for _, m := range st.sizes {
			out.Messages = append(out.Messages, Message{Child: g.child, Variant: g.variant, Subs: subs[:m],
				Parts: len(st.sizes)})
			subs = subs[m:]
		}
	}
	return out, nil
}

// Split appends to sizes the sizes of the messages n sub-requests of one parent for destination d go in. A message
// runs whole on one replica, in model batches of at most the max batch one after the other (pkg/batching), so one
// message of n items took ceil(n / max batch) batch latencies while the other replicas idled. The rule:
//   - n up to the max batch: one message, as before (a small fan-out pays nothing).
//   - more: the model batches the one message would have run, max batch, max batch, ..., the rest, each a message
//     of its own, which free replicas run at once: the same replica time, and about one batch latency.
//   - finer, where that finishes sooner: spread over the destination's replicas, but with no message under half a
//     max batch, m = min(replicas, floor(n / ceil(max batch / 2))) messages of sizes within one of each other, when
//     m is more than the fewest and ceil(n / m) items' profiled latency is lower than a max batch's. (It spends more
//     replica time, one batch's fixed cost per extra message, for a shorter wait.)
//
// So 18 items for a max batch of 8 go 8+8+2 on 3 replicas and 5+5+4+4 on 4 (when 5 runs faster than 8). A destination
// the plan does not host (a variant a new plan retired) gets one message.
func Split(sizes []int, n int, d Dest) []int {
	if d.MaxBatch < 1 || n <= d.MaxBatch {
		return append(sizes, n)
	}
	fewest := (n + d.MaxBatch - 1) / d.MaxBatch
	spread := min(d.Replicas, n/((d.MaxBatch+1)/2))
	if spread > fewest && d.Variant != nil && len(d.Variant.Profile) > 0 &&
		d.Variant.LatencyFor((n+spread-1)/spread).P50Ms < d.Variant.LatencyFor(d.MaxBatch).P50Ms {
		for p := range spread {
			size := n / spread
			if p < n%spread {
				size++
			}
			sizes = append(sizes, size)
		}
		return sizes
	}
	for ; n > 0; n -= d.MaxBatch {
		sizes = append(sizes, min(n, d.MaxBatch))
	}
	return sizes
}
