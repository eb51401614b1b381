package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func traffic(t testing.TB) *pipeline.Spec {
	t.Helper()
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// started is a core serving spec with loki, begun from the first plan at now.
func started(t testing.TB, now time.Time, specs ...*pipeline.Spec) *Cluster {
	t.Helper()
	var systems []control.System
	for _, spec := range specs {
		sys, err := control.ParseSystem("loki", spec, control.Config{SolveWorkers: 1})
		if err != nil {
			t.Fatal(err)
		}
		systems = append(systems, sys)
	}
	c, err := New(specs, systems, Config{Control: control.Config{SolveWorkers: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Pipelines() {
		first, err := control.FirstPlan(p.Spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Begin(p, first, false, now); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// tickAndPublish ticks and publishes everything decided, as the planner and the simulator do.
func tickAndPublish(c *Cluster, now time.Time, able int) []Decision {
	return tickAndPublishOn(c, now, plan.Uniform(able))
}

// tickAndPublishOn is tickAndPublish on a cluster of classes.
func tickAndPublishOn(c *Cluster, now time.Time, able plan.Cluster) []Decision {
	ds := c.Tick(now, able)
	for _, d := range ds {
		if d.Plan != nil {
			c.Published(d, now, able)
		}
	}
	return ds
}

// TestDemandUnknownHoldsThePlan: until a frontend has reported, the core says the demand is unknown and the plan in
// force stands, whoever drives it (the simulator never said so before the core, and planned for the minimum).
func TestDemandUnknownHoldsThePlan(t *testing.T) {
	now := time.Unix(1000, 0)
	c := started(t, now, traffic(t))
	for i := range 3 {
		now = now.Add(TickEvery)
		d := tickAndPublish(c, now, 20)[0]
		if !d.Observed.DemandUnknown || d.Plan != nil {
			t.Fatalf("tick %d with no report: demand unknown %v, plan %v; want unknown and no plan", i,
				d.Observed.DemandUnknown, d.Plan != nil)
		}
	}
	if _, err := c.Report("traffic", wire.DemandReport{Frontend: "f1", Count: 100, IntervalMs: 1000}, now); err != nil {
		t.Fatal(err)
	}
	now = now.Add(TickEvery)
	d := tickAndPublish(c, now, 20)[0]
	if d.Observed.DemandUnknown || d.Plan == nil || !d.Replanned {
		t.Fatalf("after a report: demand unknown %v, replanned %v; want a new allocation", d.Observed.DemandUnknown,
			d.Replanned)
	}
	if _, err := c.Report("nope", wire.DemandReport{Frontend: "f1", Count: 1, IntervalMs: 1000}, now); err == nil {
		t.Fatal("a report for a pipeline the core does not serve was taken")
	}
}

// TestRehomeAtEveryLookAfterAPlan: for RehomeAfterPlan after a new allocation, every look moves the retired
// variants' queues (the planner did; the simulator waited for the next second), and not after.
func TestRehomeAtEveryLookAfterAPlan(t *testing.T) {
	now := time.Unix(1000, 0)
	c := started(t, now, traffic(t))
	p := c.Pipelines()[0]
	queues := func() map[string]map[string]float64 { return map[string]map[string]float64{"traffic": {}} }
	if got := c.Look(now, plan.Uniform(20), queues()); len(got.Rehome) != 0 {
		t.Fatalf("look before any new plan moves %d pipelines' queues", len(got.Rehome))
	}
	if _, err := c.Report("traffic", wire.DemandReport{Frontend: "f1", Count: 200, IntervalMs: 1000}, now); err != nil {
		t.Fatal(err)
	}
	now = now.Add(TickEvery)
	if d := tickAndPublish(c, now, 20)[0]; !d.Replanned {
		t.Fatal("no new allocation after the first report")
	}
	for _, tc := range []struct {
		after time.Duration
		moves bool
	}{{100 * time.Millisecond, true}, {RehomeAfterPlan - time.Millisecond, true}, {RehomeAfterPlan, false}} {
		got := c.Look(now.Add(tc.after), plan.Uniform(20), queues())
		if moved := len(got.Rehome) == 1 && got.Rehome[0] == p; moved != tc.moves {
			t.Errorf("look %v after the plan: moves the queues %v, want %v", tc.after, moved, tc.moves)
		}
	}
	if got := c.Look(now.Add(100*time.Millisecond), plan.Uniform(20), map[string]map[string]float64{}); len(got.Rehome) != 0 {
		t.Error("a look that did not see the pipeline's queues moves them")
	}
}

// TestTunerSeesRecentMessageSizes: the tuner turns the messages waiting into items with the items per message the
// workers counted of late, not an all-time average that keeps a gone worker's counts (as the planner did) and not
// the simulator's exact items: both now give messages, and the core converts them the same way.
func TestTunerSeesRecentMessageSizes(t *testing.T) {
	now := time.Unix(1000, 0)
	c := started(t, now, traffic(t))
	p := c.Pipelines()[0]
	root := p.Current().Variants[0]
	hop := wire.VariantKey{Task: root.Task, Variant: root.Variant}.String()
	key := "traffic:" + hop
	beat := func(id string, items, messages uint64) {
		c.Heartbeat(id, wire.Registration{Started: time.Unix(1, 0), Observed: map[string]wire.Observed{
			key: {FanoutCounts: wire.FanoutCounts{Items: items}, Messages: messages}}}, now)
	}
	waiting := func() float64 {
		c.Look(now, plan.Uniform(20), map[string]map[string]float64{"traffic": {hop: 10}})
		for _, v := range c.tuneInput(p, plan.Uniform(20)).Variants {
			if v.Key == hop {
				return v.Waiting
			}
		}
		t.Fatalf("%s not in the tuner's input", hop)
		return 0
	}
	if got := waiting(); got != 10 {
		t.Fatalf("no message counted yet: 10 messages seen as %v items, want 10", got)
	}
	beat("old", 10000, 1000) // 10 items a message, for a long time
	c.Tick(now, plan.Uniform(20))
	if got := waiting(); got != 100 {
		t.Fatalf("10 items a message: 10 messages seen as %v items, want 100", got)
	}
	for i := range 20 { // the old worker moved to another variant (its counters stay); a new one's messages hold 2
		now = now.Add(TickEvery)
		beat("old", 10000, 1000)
		beat("new", uint64(20*(i+1)), uint64(10*(i+1)))
		c.Tick(now, plan.Uniform(20))
	}
	if got := waiting(); got < 19.9 || got > 20.1 {
		t.Fatalf("20 s of messages of 2 items since the old worker moved: 10 messages seen as %v items, want 20", got)
	}
}

// TestServersSplitEvenly: with even sharing, pipelines share the able workers evenly, the first ones taking the
// remainder, and the assignment gives each its plan's replicas.
func TestServersSplitEvenly(t *testing.T) {
	now := time.Unix(1000, 0)
	c := started(t, now, traffic(t), renamed(traffic(t), "second"))
	c.sharing = control.SharingEven
	if got := c.divide(nil, plan.Uniform(5)); got[0].Total() != 3 || got[1].Total() != 2 {
		t.Fatalf("5 workers split %v, want [3 2]", got)
	}
	var names []string
	for i := range 50 {
		names = append(names, fmt.Sprintf("w%02d", i))
	}
	next, unplaced := c.Assign(names, nil, nil)
	per := map[string]int{}
	for _, a := range next {
		per[a.Pipeline]++
	}
	want := c.Pipelines()[0].Current().Servers() + c.Pipelines()[1].Current().Servers()
	if per["traffic"]+per["second"] != want || unplaced != 0 || per["traffic"] == 0 || per["second"] == 0 {
		t.Fatalf("assigned %v with %d unplaced, want both pipelines' %d replicas", per, unplaced, want)
	}
}

// TestJointDivision: by default (loki), the workers are divided by the joint allocation: traffic at 300 QPS and
// ocr-chain at 20 on 20 workers, where an even split leaves traffic 10 and most of ocr-chain's half idle, gives
// traffic what it needs for an accuracy within 0.005 of its plan alone on the 20, and ocr-chain the rest.
func TestJointDivision(t *testing.T) {
	chain, err := pipeline.Load("../../examples/ocr-chain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	alone := started(t, now, traffic(t))
	c := started(t, now, traffic(t), chain)
	if c.Sharing() != control.SharingJoint {
		t.Fatalf("sharing %q by default for loki, want joint", c.Sharing())
	}
	for _, x := range []*Cluster{alone, c} {
		if _, err := x.Report("traffic", wire.DemandReport{Frontend: "f", Count: 300, IntervalMs: 1000}, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Report(chain.Name, wire.DemandReport{Frontend: "f", Count: 20, IntervalMs: 1000}, now); err != nil {
		t.Fatal(err)
	}
	now = now.Add(TickEvery)
	single := tickAndPublish(alone, now, 20)[0].Plan
	ds := tickAndPublish(c, now, 20)
	if c.DivisionErr() != nil {
		t.Fatal(c.DivisionErr())
	}
	shares := []int{ds[0].Observed.Servers, ds[1].Observed.Servers}
	if shares[0]+shares[1] != 20 || shares[0] <= 10 {
		t.Fatalf("shares %v: want traffic more than an even split's 10, and all 20 shared", shares)
	}
	got, want := ds[0].Plan.Allocation.SystemAccuracy, single.Allocation.SystemAccuracy
	if got < want-0.005 {
		t.Errorf("traffic's accuracy %.4f on %d workers, want within 0.005 of its %.4f alone", got, shares[0], want)
	}
	if ds[1].Plan == nil || ds[1].Plan.Servers() > shares[1] {
		t.Errorf("ocr-chain's plan does not fit its share of %d", shares[1])
	}
	t.Logf("shares %v: traffic %.4f (alone %.4f, %s), ocr-chain %.4f", shares, got, want, single.Mode,
		ds[1].Plan.Allocation.SystemAccuracy)
}

func renamed(spec *pipeline.Spec, name string) *pipeline.Spec {
	c := *spec
	c.Name = name
	return &c
}

// TestLoansRespectClasses: a tuner lends only the workers no plan hosts and no other pipeline borrowed, and the
// highest class looks first: when two pipelines burst at once and the idle workers cannot cover both, the high class
// gets them; the low class never takes a worker from the high class's plan.
func TestLoansRespectClasses(t *testing.T) {
	now := time.Unix(1000, 0)
	low, high := renamed(traffic(t), "low"), renamed(traffic(t), "high")
	high.Priority = 5
	c := started(t, now, low, high) // low first: the order given must not decide
	for _, name := range []string{"low", "high"} {
		if _, err := c.Report(name, wire.DemandReport{Frontend: "f1", Count: 200, IntervalMs: 1000}, now); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(TickEvery)
	tickAndPublish(c, now, 40)
	planned := c.Pipeline("low").Current().Servers() + c.Pipeline("high").Current().Servers()
	const idle = 4
	burst := map[string]map[string]float64{"low": {"detect/yolov5x": 5000}, "high": {"detect/yolov5x": 5000}}
	changed := false
	for range 3 { // the growth of the queues is measured over looks
		now = now.Add(100 * time.Millisecond)
		changed = c.Look(now, plan.Uniform(planned+idle), burst).Loans || changed
	}
	if !changed {
		t.Fatal("no loans in a burst with idle workers")
	}
	sum := func(m map[string]int) (n int) {
		for _, v := range m {
			n += v
		}
		return n
	}
	lentHigh, lentLow := sum(c.Pipeline("high").Lent()), sum(c.Pipeline("low").Lent())
	if lentHigh != idle || lentLow != 0 {
		t.Fatalf("lent %d to the high class and %d to the low one; want all %d idle workers to the high class",
			lentHigh, lentLow, idle)
	}
	next, unplaced := c.Assign(names(planned+idle), nil, nil)
	if unplaced != 0 {
		t.Fatalf("%d replicas or loans got no worker: a loan took a worker some plan hosts", unplaced)
	}
	per := map[string]int{}
	for _, a := range next {
		per[a.Pipeline]++
	}
	if per["high"] != c.Pipeline("high").Current().Servers()+idle {
		t.Fatalf("the high class has %d workers, want its plan's and the %d lent", per["high"], idle)
	}
}

func names(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("w%03d", i))
	}
	return out
}

// TestHeartbeatIgnoresMalformedKeys: a heartbeat's observed keys come from the KV bucket (untrusted); one that is
// not "pipeline:task/variant" is left out, rather than cut by hand into a "variant" named after a task, whose
// factor would then be published in a plan (which workers refuse: it names no variant of the spec).
func TestHeartbeatIgnoresMalformedKeys(t *testing.T) {
	now := time.Unix(1000, 0)
	c := started(t, now, traffic(t))
	p := c.Pipelines()[0]
	for i, key := range []string{"traffic:detect", "traffic:detect/", "traffic:detect/yolov5x/x",
		"traffic:detect/yolov5x,detect/yolov5n", "traffic/detect/yolov5x", "traffic:detect:yolov5x"} {
		for n := uint64(1); n <= 3; n++ { // cumulative counters, as a worker reports them
			counts := wire.FanoutCounts{Items: 1000 * n,
				Children: map[string]uint64{"classify_car": 5000 * n, "recognize_face": 100 * n}}
			reg := wire.Registration{Started: time.Unix(1, 0),
				Observed: map[string]wire.Observed{key: {FanoutCounts: counts}}}
			c.Heartbeat(fmt.Sprint("w", i), reg, now)
		}
	}
	p.fanout.Tick()
	for key := range p.fanout.Estimate(p.Spec) {
		t.Errorf("a factor estimated for %q from malformed heartbeats", key)
	}
}

// TestDivisionPerClass: the workers of a cluster of several classes are divided class by class (evenly, the first
// pipeline taking each class's remainder), each loop plans on its share of every class with the classes' prices, and
// the assignment puts each replica on a worker of its variant's class.
func TestDivisionPerClass(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	c := started(t, now, spec, renamed(spec, "second"))
	able := plan.NewCluster(map[string]int{"cpu": 5, "fast": 3}, plan.Prices{"cpu": 0.4, "fast": 2.5})
	for _, name := range []string{spec.Name, "second"} {
		if _, err := c.Report(name, wire.DemandReport{Frontend: "f", Count: 20, IntervalMs: 1000}, now); err != nil {
			t.Fatal(err)
		}
	}
	if got := evenSplit(2, able); got[0].String() != "cpu=3,fast=2" || got[1].String() != "cpu=2,fast=1" {
		t.Errorf("an even split of %s: %v and %v, want cpu=3,fast=2 and cpu=2,fast=1", able, got[0], got[1])
	}
	now = now.Add(TickEvery)
	ds := tickAndPublishOn(c, now, able)
	if err := c.DivisionErr(); err != nil {
		t.Fatal(err)
	}
	sum := map[string]int{}
	for i, d := range ds {
		o := d.Observed
		for _, sc := range o.Cluster {
			sum[sc.Name] += sc.Servers
		}
		if o.Servers != o.Cluster.Total() || o.Cluster.Price("fast") != 2.5 {
			t.Errorf("pipeline %d planned on %+v (%d servers): want its share of each class, priced", i, o.Cluster,
				o.Servers)
		}
		if d.Plan == nil {
			t.Fatalf("pipeline %d: no plan", i)
		}
		for class, n := range d.Plan.ServersByClass() {
			if n > o.Cluster.Servers(class) {
				t.Errorf("pipeline %d's plan uses %d %s servers of its share of %d", i, n, class, o.Cluster.Servers(class))
			}
		}
		t.Logf("pipeline %d: share %s, plan %v, cost %.2f/h", i, o.Cluster, d.Plan.ServersByClass(),
			d.Plan.Allocation.CostPerHour)
	}
	if sum["cpu"] != 5 || sum["fast"] != 3 {
		t.Errorf("the shares hold %v, want all of cpu=5,fast=3", sum)
	}
	var workers []string
	classes := map[string]string{}
	for _, sc := range able {
		for i := range sc.Servers {
			w := fmt.Sprintf("%s%d", sc.Name, i)
			workers, classes[w] = append(workers, w), sc.Name
		}
	}
	next, _ := c.Assign(workers, classes, nil)
	for w, a := range next {
		if !a.Idle() && wire.ClassOf(a.Variant) != classes[w] {
			t.Errorf("worker %s of class %s hosts %s", w, classes[w], a.Variant)
		}
	}
}

// TestTunerLendsPerClass: the workers the tuner sees are counted per class: a class's idle workers are those no plan
// hosts a replica on, so a burst at a variant of a class with none idle gets no loan.
func TestTunerLendsPerClass(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	c := started(t, now, spec)
	p := c.Pipelines()[0]
	used := p.Current().ServersByClass()
	able := plan.NewCluster(map[string]int{"cpu": used["cpu"] + 3, "fast": used["fast"]}, nil)
	in := c.tuneInput(p, able)
	if in.IdleByClass["cpu"] != 3 || in.IdleByClass["fast"] != 0 || in.Idle != 3 {
		t.Fatalf("idle %d, per class %v: want 3 cpu, 0 fast", in.Idle, in.IdleByClass)
	}
}
