package deadline

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

var t0 = time.Unix(1000, 0).UnixNano()

// TestStageRerouteAllotsTheRestOfThePath: after task a of the chain a -> b -> c, an item is in time for b's chosen
// variant when its time left covers that variant's allotment, the hop to b, c's allotment at its slowest hosted
// variant with the hop to it, and the reply's hop; a moment less and it goes to b's fast backup.
func TestStageRerouteAllotsTheRestOfThePath(t *testing.T) {
	spec := chainSpec(t)
	p := chainPlan(true)
	s := NewStage(spec, p, Reroute, "a", "x", 100*ms, 1)
	scale := (500.0 - 3) / (100 + 100 + 50) // the tightest (only) chain at its slowest variants fills the SLO
	if s.Scale != scale {
		t.Fatalf("scale %v, want %v", s.Scale, scale)
	}
	allotted := func(latencyMs float64) time.Duration { // b's variant, the hop to b, c and its hop, the reply
		return time.Duration(latencyMs*scale*float64(ms)) + ms + (ms + time.Duration(50*scale*float64(ms))) + ms
	}
	routes := []plan.Route{{Variant: "slow", Prob: 1}}
	for _, tc := range []struct {
		left         time.Duration
		want, reason string
	}{
		{allotted(100), "slow", ""},
		{allotted(100) - time.Nanosecond, "fast", ""},
		{allotted(20), "fast", ""},
		{allotted(20) - time.Nanosecond, "", wire.DropNoFaster},
	} {
		d := s.Route("b", routes, t0, 0, tc.left, 0.5, 0.5)
		if d.Variant != tc.want || d.Reason != tc.reason {
			t.Errorf("left %v: %+v, want variant %q reason %q", tc.left, d, tc.want, tc.reason)
		}
	}
}

// TestStageLeastRest: before task a, reroute counts on the least time below that an item is sure to get: b at its
// slowest hosted variant, since the routing table may choose it, unless a backup this stage may still reroute to is
// faster; c likewise; a hop before each task and one for the reply.
func TestStageLeastRest(t *testing.T) {
	spec := chainSpec(t)
	routes := []plan.Route{{Variant: "slow", Prob: 1}}
	for _, tc := range []struct {
		name      string
		backup    bool
		reroutes  int           // reroutes to b's backup at t0 before asking
		at        time.Duration // when to ask, after t0
		bMs       float64       // the profiled time of the variant of b counted on
		wantDrops int           // of the reroutes, how many found no backup
	}{
		{"the fast variant of b is a backup", true, 0, 0, 20, 0},
		{"the fast variant of b is full: count on the slow one", false, 0, 0, 100, 0},
		// Stage a's share of fast's 5 QPS of spare capacity: all of it (a is the only variant of its task), a
		// second's worth at once.
		{"the stage used up its share of the backup", true, 6, 0, 100, 1},
		{"a fifth of a second later, one more reroute may go", true, 6, 200 * ms, 20, 1},
	} {
		s := NewStage(spec, chainPlan(tc.backup), Reroute, "a", "x", 100*ms, 1)
		drops := 0
		for range tc.reroutes {
			if d := s.Route("b", routes, t0, 0, 150*ms, 0.5, 0.5); d.Variant == "" {
				drops++
			}
		}
		if drops != tc.wantDrops {
			t.Errorf("%s: %d reroutes dropped, want %d", tc.name, drops, tc.wantDrops)
		}
		want := 3*ms + time.Duration((tc.bMs+50)*s.Scale*float64(ms))
		if got := s.LeastRest(t0 + int64(tc.at)); got != want {
			t.Errorf("%s: least rest %v, want %v", tc.name, got, want)
		}
	}
}

// TestStageBackupShare: a stage reroutes to a backup at most its share of the backup's spare capacity: the share of
// its task's capacity that the replicas deciding through it have.
func TestStageBackupShare(t *testing.T) {
	spec := chainSpec(t)
	p := chainPlan(true)
	p.Variants[0].Replicas = 2 // a/x: two replicas, the whole of task a's capacity
	p.Routing.Backup["b"][0].LeftoverQPS = 8
	routes := []plan.Route{{Variant: "slow", Prob: 1}}
	for _, tc := range []struct {
		name     string
		replicas int
		want     int // reroutes admitted at one instant: a second of the stage's share
	}{
		{"one of two replicas (a live worker)", 1, 4},
		{"both replicas (the simulator's stage)", 2, 8},
		{"a variant the plan does not host", 0, 0},
	} {
		s := NewStage(spec, p, Reroute, "a", "x", 100*ms, tc.replicas)
		got := 0
		for range 20 {
			if d := s.Route("b", routes, t0, 0, 150*ms, 0.5, 0.5); d.Rerouted {
				got++
			}
		}
		if got != tc.want {
			t.Errorf("%s: %d reroutes, want %d", tc.name, got, tc.want)
		}
	}
}

// chainSpec is the chain a -> b -> c; b has a slow accurate variant and a fast one.
func chainSpec(t *testing.T) *pipeline.Spec {
	t.Helper()
	spec, err := pipeline.Parse([]byte(`
name: chain
slo_ms: 500
comm_latency_ms: 1
tasks:
  - name: a
    children: [b]
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1},
         profile: [{batch: 1, p50_ms: 100, p95_ms: 100}]}
  - name: b
    children: [c]
    variants:
      - {name: slow, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1},
         profile: [{batch: 1, p50_ms: 100, p95_ms: 100}]}
      - {name: fast, accuracy: 0.7, executor: {kind: emulated}, fanout: {mean: 1},
         profile: [{batch: 1, p50_ms: 20, p95_ms: 20}]}
  - name: c
    variants:
      - {name: y, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 50, p95_ms: 50}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// chainPlan hosts every variant of chainSpec; with backup, b's fast variant has 5 QPS of spare capacity.
func chainPlan(backup bool) *plan.Plan {
	p := &plan.Plan{Variants: []plan.VariantPlan{
		{Task: "a", Variant: "x", Replicas: 1, MaxBatch: 1, BudgetMs: 100, CapacityQPS: 10},
		{Task: "b", Variant: "slow", Replicas: 1, MaxBatch: 1, BudgetMs: 100},
		{Task: "b", Variant: "fast", Replicas: 1, MaxBatch: 1, BudgetMs: 20},
		{Task: "c", Variant: "y", Replicas: 1, MaxBatch: 1, BudgetMs: 50},
	}}
	if backup {
		p.Routing.Backup = map[string][]plan.Backup{"b": {{Variant: "fast", LeftoverQPS: 5, LatencyMs: 20,
			Accuracy: 0.7}}}
	}
	return p
}

// TestStageExpectsTheBatchAtHand: before a task, an item is judged on the profiled time of the batch it runs in when
// nothing waits behind it (a batch of the items taken, its own included), and on the max batch's otherwise; in a
// plan at the edge of its capacity (accuracy mode), on the max batch's always. The times are the budget's ratio to
// the profile (a budget measured slower stretches them alike).
func TestStageExpectsTheBatchAtHand(t *testing.T) {
	spec, err := pipeline.Parse([]byte(`
name: batched
slo_ms: 500
comm_latency_ms: 1
batch_sizes: [1, 4, 8]
tasks:
  - name: a
    children: [c]
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1},
         profile: [{batch: 1, p50_ms: 20, p95_ms: 20}, {batch: 4, p50_ms: 50, p95_ms: 50},
                   {batch: 8, p50_ms: 100, p95_ms: 100}]}
  - name: c
    variants:
      - {name: y, accuracy: 0.9, executor: {kind: emulated},
         profile: [{batch: 1, p50_ms: 50, p95_ms: 50}, {batch: 4, p50_ms: 60, p95_ms: 60},
                   {batch: 8, p50_ms: 70, p95_ms: 70}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	planIn := func(mode string, budgetMs float64) *plan.Plan {
		return &plan.Plan{Mode: mode, Variants: []plan.VariantPlan{
			{Task: "a", Variant: "x", Replicas: 1, MaxBatch: 8, BudgetMs: budgetMs, CapacityQPS: 80},
			{Task: "c", Variant: "y", Replicas: 1, MaxBatch: 1, BudgetMs: 50, CapacityQPS: 20}}}
	}
	for _, tc := range []struct {
		name           string
		mode           string
		budgetMs       float64
		left           time.Duration
		taken, waiting int
		want           string
	}{
		{"alone in its batch, nothing behind", plan.ModeHardware, 100, 250 * ms, 1, 0, ""},
		{"a batch of 4, nothing behind", plan.ModeHardware, 100, 250 * ms, 4, 0, ""},
		{"a batch of 5 runs as one of 8", plan.ModeHardware, 100, 250 * ms, 5, 0, wire.DropNoFaster},
		{"messages wait behind it", plan.ModeHardware, 100, 250 * ms, 1, 3, wire.DropNoFaster},
		{"at the edge", plan.ModeAccuracy, 100, 250 * ms, 1, 0, wire.DropNoFaster},
		{"too little time even alone", plan.ModeHardware, 100, 180 * ms, 1, 0, wire.DropNoFaster},
		{"measured 30% slower, alone", plan.ModeHardware, 130, 200 * ms, 1, 0, ""},
	} {
		p := planIn(tc.mode, tc.budgetMs)
		s := NewStage(spec, p, Reroute, "a", "x", time.Duration(tc.budgetMs*float64(ms)), 1)
		// The rest below a: the hop to c, c's allotment, the reply's hop.
		if rest, want := s.LeastRest(t0), 2*ms+time.Duration(50*s.Scale*float64(ms)); rest != want {
			t.Fatalf("%s: least rest %v, want %v", tc.name, rest, want)
		}
		if got := s.BeforeExecute(t0, t0+int64(tc.left), t0, tc.taken, tc.waiting); got != tc.want {
			t.Errorf("%s: %v left, least rest %v: %q, want %q", tc.name, tc.left, s.LeastRest(t0), got, tc.want)
		}
	}
}
