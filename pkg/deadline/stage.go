package deadline

import (
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Stage is what the deadline policy knows of one hosted variant under one plan: the time an item may spend at the
// variant's task, how much time the tasks below need, and, per child task, the hosted variants and the backups a
// late item may be rerouted to. The live workers and the simulator build one per variant and plan, and decide
// with its methods. A stage is not safe for concurrent use: it counts the reroutes it sends to each backup. Its
// times are Unix nanoseconds: the simulator's clock is one, and a time.Time per item was a tenth of its decisions.
type Stage struct {
	Policy   Policy
	rule     rule // Policy's
	Task     string
	LastTask bool
	// Budget is the variant's profiled time at its max batch; Allowance the time an item may spend at the task
	// (queueing plus processing): the budget stretched by the plan's budget scale Scale.
	Budget, Allowance time.Duration
	Scale             float64
	// expectedAt is the variant's profiled time of a batch of n items, at n (the budget's profile point stretched
	// as the budget is, when the plan measured it slower), up to its max batch: Budget beyond (expected).
	expectedAt []time.Duration
	reply      time.Duration // the last hop, to the frontend
	// children are the child tasks' options, in the task's order: a task has a few, so finding one by a scan
	// (child) is cheaper than a map's hash (with the hosted variant's, a third of Route's time in the simulator).
	children []*childOptions
}

// childOptions are a child task's hosted variants and its backups (variants with spare capacity), the allotment of
// its slowest hosted variant, and the time allotted below it (Progress.Rest).
type childOptions struct {
	task    string
	hosted  []Option // one per variant, found by a scan (option)
	backups []backup
	slowest time.Duration
	rest    time.Duration
	open    []Option // scratch: the backups that can take an item now
}

// backup is a variant with spare capacity, and this stage's share of that capacity: the rate at which it may reroute
// items there. Without the limit every late item of an overloaded task would go to the same backup, whose queue
// would then grow until the items in it missed their deadlines too.
type backup struct {
	Option
	allotment time.Duration // Latency stretched by the plan's budget scale
	bucket    tokenBucket
}

// backupBurst is how many seconds of its share of a backup's spare capacity a stage may use at once.
const backupBurst = 1.0

// NewStage builds the stage of a variant of task whose budget (profiled time at its max batch) is budget, under
// plan p (nil before the first plan: no scale, no children hosted). replicas is how many of the variant's replicas
// decide through this stage (a live worker decides for itself, 1; the simulator runs one stage for all of them):
// the stage reroutes to each backup at most its share of the backup's spare capacity, the share of the task's
// capacity those replicas have. A variant the plan does not host has no share: its late items are dropped.
func NewStage(spec *pipeline.Spec, p *plan.Plan, policy Policy, task, variant string, budget time.Duration,
	replicas int) *Stage {
	s := &Stage{Policy: policy, rule: ruleOf(policy), Task: task, LastTask: spec.IsLeaf(task), Budget: budget,
		Allowance: budget, Scale: 1}
	if p == nil {
		return s
	}
	s.reply = commLatency(spec)
	s.Scale = p.BudgetScale(spec)
	s.expectedAt = expectedByBatch(spec, p, task, variant, budget)
	s.Allowance = time.Duration(float64(budget) * s.Scale)
	share, taskCapacity := 0.0, 0.0
	for _, vp := range p.Variants {
		if vp.Task == task {
			taskCapacity += vp.CapacityQPS
		}
	}
	if vp := p.Find(task, variant); vp != nil && taskCapacity > 0 && vp.Replicas > 0 {
		share = vp.CapacityQPS / taskCapacity * float64(min(replicas, vp.Replicas)) / float64(vp.Replicas)
	}
	t := spec.Task(task)
	s.children = make([]*childOptions, 0, len(t.Children))
	for _, child := range t.Children {
		co := &childOptions{task: child}
		for _, vp := range p.Variants {
			if vp.Task == child {
				co.setHosted(option(spec, child, vp.Variant, vp.BudgetMs))
			}
		}
		for _, b := range p.Routing.Backup[child] {
			rate := b.LeftoverQPS * share
			o := option(spec, child, b.Variant, b.LatencyMs)
			co.backups = append(co.backups, backup{Option: o, allotment: time.Duration(float64(o.Latency) * s.Scale),
				bucket: newTokenBucket(rate, max(1, rate*backupBurst))})
		}
		for _, o := range co.hosted {
			co.slowest = max(co.slowest, time.Duration(float64(o.Latency)*s.Scale))
		}
		co.rest = commLatency(spec) + allottedBelow(spec, p, child, s.Scale)
		s.children = append(s.children, co)
	}
	return s
}

// expectedByBatch is a hosted variant's profiled time of a batch of n items at n, 1 up to its max batch under p:
// each profile point's p50 (pipeline.Variant.LatencyFor, as the budget is) in the ratio of budget to the p50 at the
// max batch. nil when the variant is not hosted or has no profile, and under a plan that is not in hardware mode:
// every batch is then expected to take the budget. A plan at the edge of its servers' capacity (accuracy mode, no
// headroom) has no time to lose on an item that runs this task and misses below it: judged on its batch's time,
// the traffic camera's plan at the edge missed 1.5% of its deadlines against under 1% (TestTheEdgeIsChecked).
func expectedByBatch(spec *pipeline.Spec, p *plan.Plan, task, variant string, budget time.Duration) []time.Duration {
	vp, v := p.Find(task, variant), spec.Variant(task, variant)
	if p.Mode != plan.ModeHardware || vp == nil || v == nil || len(v.Profile) == 0 || vp.MaxBatch < 2 {
		return nil
	}
	full := v.LatencyFor(vp.MaxBatch).P50Ms
	if full <= 0 {
		return nil
	}
	out := make([]time.Duration, vp.MaxBatch+1)
	for n := 1; n <= vp.MaxBatch; n++ {
		out[n] = time.Duration(float64(budget) * min(v.LatencyFor(n).P50Ms/full, 1))
	}
	return out
}

// expected is the time a batch of the item at hand is expected to take: the items taken into it so far, the item's
// own included, when no message waits behind it, for nothing more can join the batch; the max batch's (Budget) when
// some do. An item judged on the max batch's time at every load was dropped with time to spare: at 20 QPS, batches
// of one or two items at a detector of 118 ms at its max batch of 8 (make soak, ocr-chain: 2% of its requests
// dropped before the detector on a loaded machine, each with more than twice the time its path took).
func (s *Stage) expected(taken, waiting int) time.Duration {
	if waiting > 0 || taken < 1 || taken >= len(s.expectedAt) {
		return s.Budget
	}
	return s.expectedAt[taken]
}

// child is the options of child task name; nil for a task that is not a child.
func (s *Stage) child(name string) *childOptions {
	if i := s.ChildIndex(name); i >= 0 {
		return s.children[i]
	}
	return nil
}

// ChildIndex is child task name's index for RouteAt: its place among the task's children (pipeline.Task.Children);
// -1 for a task that is not a child, or before the first plan.
func (s *Stage) ChildIndex(name string) int {
	for i, co := range s.children {
		if co.task == name {
			return i
		}
	}
	return -1
}

// setHosted adds hosted variant o, in place of one of the same name.
func (co *childOptions) setHosted(o Option) {
	for i := range co.hosted {
		if co.hosted[i].Variant == o.Variant {
			co.hosted[i] = o
			return
		}
	}
	co.hosted = append(co.hosted, o)
}

// option is hosted variant v's option, nil when v is not hosted.
func (co *childOptions) option(v string) *Option {
	for i := range co.hosted {
		if co.hosted[i].Variant == v {
			return &co.hosted[i]
		}
	}
	return nil
}

// Rest is the time allotted to a sub-request for child from the end of this task, less its own variant's: the hop
// to the child, the tasks below it, the reply (Progress.Rest); 0 for a task that is not a child.
func (s *Stage) Rest(child string) time.Duration {
	if co := s.child(child); co != nil {
		return co.rest
	}
	return 0
}

// RestBelow is Stage.Rest for the root task under plan p: the time allotted from the frontend's publish to the
// reply, less the root's own: the publish's hop, the tasks below the root, the reply.
func RestBelow(spec *pipeline.Spec, p *plan.Plan, task string) time.Duration {
	return commLatency(spec) + allottedBelow(spec, p, task, p.BudgetScale(spec))
}

// commLatency is the latency of one hop.
func commLatency(spec *pipeline.Spec) time.Duration {
	return time.Duration(spec.CommLatencyMs * float64(time.Millisecond))
}

// allottedBelow is the time allotted after task finishes until the reply, down the longest chain below it: each
// task at the allotment of its slowest hosted variant (the allotments the budget scale is made of), since the
// routing table may send an item to any of them; a hop before each task and one for the reply. A child task with
// nothing hosted is left out: its items are dropped as unrouted.
func allottedBelow(spec *pipeline.Spec, p *plan.Plan, task string, scale float64) time.Duration {
	comm := commLatency(spec)
	longest := comm // the reply
	for _, child := range spec.Task(task).Children {
		pick, hosted := 0.0, false
		for _, v := range p.Variants {
			if v.Task == child {
				pick, hosted = max(pick, v.BudgetMs), true
			}
		}
		if !hosted {
			continue
		}
		t := comm + time.Duration(pick*scale*float64(time.Millisecond)) + allottedBelow(spec, p, child, scale)
		longest = max(longest, t)
	}
	return longest
}

// BeforeExecute decides whether to drop an item taken from the variant's queue at now, due at due, that reached the
// queue at enqueued (Unix nanoseconds): "" keeps it, otherwise the drop reason (see the package function
// BeforeExecute). taken is how many items its batch holds with it (those taken before it, and its own); waiting how
// many messages wait in the queue behind it: its processing is expected to take the profiled time of a batch of
// taken items when none waits, and of the max batch otherwise (Queued.Expected).
func (s *Stage) BeforeExecute(now, due, enqueued int64, taken, waiting int) string {
	q := Queued{Left: time.Duration(due - now), LastTask: s.LastTask, Expected: s.expected(taken, waiting),
		Allowance: s.Allowance, Waited: time.Duration(now - enqueued)}
	if s.rule == ruleReroute { // the only policies that look below the task
		q.LeastRest = s.LeastRest(now)
	}
	return beforeExecute(s.rule, &q)
}

// LeastRest is the least time allotted, at now, from the end of the task to the reply on a route an item is sure
// to get (Queued.LeastRest): each child task at the allotment of its slowest hosted variant, or of a faster backup
// while this stage's share of the backup's spare capacity is not used up; the tasks below the children at their
// slowest hosted variants (their backups are other stages' to share); the hops.
func (s *Stage) LeastRest(now int64) time.Duration {
	rest := s.reply
	for _, co := range s.children {
		if len(co.hosted) == 0 {
			continue
		}
		pick := co.slowest
		for i := range co.backups {
			if b := &co.backups[i]; b.allotment < pick && b.bucket.available(now) {
				pick = b.allotment
			}
		}
		rest = max(rest, co.rest+pick)
	}
	return rest
}

// Route decides where one sub-request for child goes after an item spent atTask at this task, with left to its
// deadline at now (Unix nanoseconds): the routing table routes picks a variant with u1, and the deadline policy keeps
// it, reroutes it to a backup with rate to spare (u2 breaks ties) or drops it. An item with no route is dropped as
// unrouted.
func (s *Stage) Route(child string, routes []plan.Route, now int64, atTask, left time.Duration,
	u1, u2 float64) Decision {
	return s.RouteAt(s.ChildIndex(child), routes, now, atTask, left, u1, u2)
}

// noOptions are the options of a child the stage does not know (before the first plan): none. Never written.
var noOptions childOptions

// RouteAt is Route for the child of index c (ChildIndex), which the hop step works out once per plan, not by name
// per sub-request. It decides as AfterTask does, and returns early in its common case, a sub-request whose chosen
// variant has the time (a Decision and a Progress built per sub-request were a third of the decision's time in
// the simulator).
func (s *Stage) RouteAt(c int, routes []plan.Route, now int64, atTask, left time.Duration,
	u1, u2 float64) Decision {
	v := plan.Pick(routes, u1)
	if v == "" {
		return Decision{Reason: wire.DropUnrouted}
	}
	co := &noOptions
	if c >= 0 {
		co = s.children[c]
	}
	chosen := co.option(v)
	if chosen == nil {
		chosen = &Option{Variant: v}
	}
	if s.rule == ruleReroute { // every backup's bucket refilled to now at every decision, as the late ones read them
		for i := range co.backups {
			co.backups[i].bucket.refill(now)
		}
	}
	pr := Progress{AtTask: atTask, Allowance: s.Allowance, Left: left, Scale: s.Scale, Rest: co.rest}
	d, ok := withoutBackups(s.rule, &pr, chosen)
	if !ok {
		var open []Option
		if len(co.backups) > 0 { // (noOptions has none: it is not written)
			co.open = co.open[:0]
			for i := range co.backups {
				if co.backups[i].bucket.has() {
					co.open = append(co.open, co.backups[i].Option)
				}
			}
			open = co.open
		}
		d = toBackup(&pr, open, u2)
	}
	if d.Rerouted {
		for i := range co.backups {
			if co.backups[i].Variant == d.Variant {
				co.backups[i].bucket.take()
			}
		}
	}
	d.Degraded = d.Variant == "" && Answers(s.Policy, d.Reason)
	return d
}

func option(spec *pipeline.Spec, task, variant string, latencyMs float64) Option {
	o := Option{Variant: variant, Latency: time.Duration(latencyMs * float64(time.Millisecond))}
	if v := spec.Variant(task, variant); v != nil {
		o.Accuracy = v.Accuracy
	}
	return o
}

// tokenBucket admits events at rate per second on average, burst at once.
type tokenBucket struct {
	rate, burst, tokens float64
	last                int64 // Unix ns of the last refill; started says there was one
	started             bool
}

func newTokenBucket(rate, burst float64) tokenBucket {
	return tokenBucket{rate: rate, burst: burst, tokens: burst}
}

// available refills the bucket up to now (Unix ns) and reports whether it holds a whole token.
func (b *tokenBucket) available(now int64) bool {
	b.refill(now)
	return b.has()
}

// refill adds the tokens earned up to now (Unix nanoseconds).
func (b *tokenBucket) refill(now int64) {
	if b.rate <= 0 {
		return
	}
	if b.started && now > b.last {
		b.tokens = min(b.burst, b.tokens+time.Duration(now-b.last).Seconds()*b.rate)
	}
	if !b.started || now > b.last {
		b.last, b.started = now, true
	}
}

// has says a token is there, as of the last refill.
func (b *tokenBucket) has() bool { return b.rate > 0 && b.tokens >= 1 }

func (b *tokenBucket) take() { b.tokens-- }
