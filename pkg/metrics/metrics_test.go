package metrics

import (
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestPlanSeriesFollowThePlan: a new plan replaces the variants' series (a retired variant's go), sets the mode's
// series to 1 and the others to 0, and counts a new epoch once.
func TestPlanSeriesFollowThePlan(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewPlanner(reg, nil)
	m.Plan(&plan.Plan{Pipeline: "p", Epoch: 1, Mode: plan.ModeHardware,
		Variants: []plan.VariantPlan{{Task: "a", Variant: "x", Replicas: 2, MaxBatch: 4}}})
	m.Plan(&plan.Plan{Pipeline: "p", Epoch: 2, Mode: plan.ModeAccuracy,
		Variants:   []plan.VariantPlan{{Task: "a", Variant: "y", Replicas: 3, MaxBatch: 8}},
		Allocation: &plan.Allocation{SystemAccuracy: 0.8, ActiveServers: 3, SolveMs: 250}})
	m.Plan(&plan.Plan{Pipeline: "p", Epoch: 2, Mode: plan.ModeAccuracy, // new routing, same allocation
		Variants:   []plan.VariantPlan{{Task: "a", Variant: "y", Replicas: 3, MaxBatch: 8}},
		Allocation: &plan.Allocation{SystemAccuracy: 0.8, ActiveServers: 3, SolveMs: 250}})
	want := `
# HELP sleipnir_plan_replicas Replicas the plan in force gives a variant.
# TYPE sleipnir_plan_replicas gauge
sleipnir_plan_replicas{pipeline="p",task="a",variant="y"} 3
# HELP sleipnir_plan_mode 1 for the mode of the plan in force (static, hardware, accuracy, overloaded), 0 for the others.
# TYPE sleipnir_plan_mode gauge
sleipnir_plan_mode{mode="accuracy",pipeline="p"} 1
sleipnir_plan_mode{mode="hardware",pipeline="p"} 0
sleipnir_plan_mode{mode="overloaded",pipeline="p"} 0
sleipnir_plan_mode{mode="static",pipeline="p"} 0
# HELP sleipnir_planner_plans_total Plans (new allocations) published.
# TYPE sleipnir_planner_plans_total counter
sleipnir_planner_plans_total{pipeline="p"} 2
# HELP sleipnir_plan_solve_duration_seconds Time the allocation solve of the plan in force took.
# TYPE sleipnir_plan_solve_duration_seconds gauge
sleipnir_plan_solve_duration_seconds{pipeline="p"} 0.25
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sleipnir_plan_replicas", "sleipnir_plan_mode",
		"sleipnir_planner_plans_total", "sleipnir_plan_solve_duration_seconds"); err != nil {
		t.Fatal(err)
	}
}

// TestEverySolveIsCounted: each solve is observed under what became of its plan, a new plan or not, and each
// division's joint solves once.
func TestEverySolveIsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewPlanner(reg, nil)
	m.Solve("p", "new_plan", 250)
	m.Solve("p", "same", 3)
	m.Solve("p", "same", 700)
	m.DivisionSolve(40)
	for _, c := range []struct {
		name, outcome string
		count         uint64
		sum           float64
	}{
		{"sleipnir_planner_solve_seconds", "new_plan", 1, 0.25},
		{"sleipnir_planner_solve_seconds", "same", 2, 0.703},
		{"sleipnir_planner_division_solve_seconds", "", 1, 0.04},
	} {
		if n, sum := histogram(t, reg, c.name, c.outcome); n != c.count || math.Abs(sum-c.sum) > 1e-9 {
			t.Errorf("%s{outcome=%q}: %d solves, %v s; want %d, %v", c.name, c.outcome, n, sum, c.count, c.sum)
		}
	}
}

// histogram is the count and sum of reg's histogram name whose outcome label is outcome ("": the one without).
func histogram(t *testing.T, reg *prometheus.Registry, name, outcome string) (uint64, float64) {
	t.Helper()
	mf, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range mf {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			got := ""
			for _, l := range s.GetLabel() {
				if l.GetName() == LabelOutcome {
					got = l.GetValue()
				}
			}
			if got == outcome {
				return s.GetHistogram().GetSampleCount(), s.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

// TestPlanCostAndClasses: the plan's cost per hour and the workers it uses per server class are gauges; a class the
// next plan no longer uses loses its series.
func TestPlanCostAndClasses(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewPlanner(reg, nil)
	m.Plan(&plan.Plan{Pipeline: "p", Epoch: 1, Mode: plan.ModeHardware,
		Variants: []plan.VariantPlan{{Task: "a", Variant: "x@fast", Replicas: 2, MaxBatch: 4},
			{Task: "b", Variant: "z@cpu", Replicas: 3, MaxBatch: 4}},
		Allocation: &plan.Allocation{ActiveServers: 5, CostPerHour: 6.2}})
	m.Plan(&plan.Plan{Pipeline: "p", Epoch: 2, Mode: plan.ModeHardware,
		Variants:   []plan.VariantPlan{{Task: "a", Variant: "x@cpu", Replicas: 4, MaxBatch: 4}},
		Allocation: &plan.Allocation{ActiveServers: 4, CostPerHour: 1.6}})
	want := `
# HELP sleipnir_plan_cost_per_hour Hourly price of the servers the plan in force uses (the planner's --price per server class; 0 when none is priced).
# TYPE sleipnir_plan_cost_per_hour gauge
sleipnir_plan_cost_per_hour{pipeline="p"} 1.6
# HELP sleipnir_plan_class_servers Workers of a server class the plan in force uses.
# TYPE sleipnir_plan_class_servers gauge
sleipnir_plan_class_servers{pipeline="p",server_class="cpu"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sleipnir_plan_cost_per_hour",
		"sleipnir_plan_class_servers"); err != nil {
		t.Fatal(err)
	}
}

// workerCounts is one worker's counters, as its heartbeat has them.
type workerCounts struct {
	serving string
	stats   wire.WorkerStats
	obs     map[string]wire.Observed
	failing *wire.AssignmentFailure
}

func (w workerCounts) Stats() wire.WorkerStats                { return w.stats }
func (w workerCounts) Observations() map[string]wire.Observed { return w.obs }
func (w workerCounts) Serving() string                        { return w.serving }
func (w workerCounts) Failing() *wire.AssignmentFailure       { return w.failing }

// TestWorkerCountersSumPerVariant: the workers of a process are summed per variant, every drop reason has a series,
// and a variant no worker serves any longer keeps its counters and shows 0 workers serving.
func TestWorkerCountersSumPerVariant(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewWorker(reg)
	m.AddSource(workerCounts{serving: "p:a/x", obs: map[string]wire.Observed{
		"p:a/x": {FanoutCounts: wire.FanoutCounts{Items: 3, Children: map[string]uint64{"b": 6}},
			Dropped: map[string]uint64{wire.DropDeadline: 1}},
		"p:a/old": {FanoutCounts: wire.FanoutCounts{Items: 5}},
	}})
	m.AddSource(workerCounts{serving: "p:a/x", obs: map[string]wire.Observed{
		"p:a/x": {FanoutCounts: wire.FanoutCounts{Items: 4, Children: map[string]uint64{"b": 2}}},
	}, stats: wire.WorkerStats{SetAside: map[string]uint64{wire.SetAsideRedelivered: 1, wire.SetAsideUndecodable: 2}}})
	m.AddSource(workerCounts{stats: wire.WorkerStats{SetAside: map[string]uint64{wire.SetAsideUndecodable: 3}}})
	m.AddSource(workerCounts{failing: &wire.AssignmentFailure{Variant: "p:a/x", Reason: "no model", Attempts: 1}})
	want := `
# HELP sleipnir_worker_items_total Items executed.
# TYPE sleipnir_worker_items_total counter
sleipnir_worker_items_total{pipeline="p",task="a",variant="old"} 5
sleipnir_worker_items_total{pipeline="p",task="a",variant="x"} 7
# HELP sleipnir_worker_subrequests_total Sub-requests emitted per child task (over items_total: the measured multiplicative factor).
# TYPE sleipnir_worker_subrequests_total counter
sleipnir_worker_subrequests_total{child="b",pipeline="p",task="a",variant="x"} 8
# HELP sleipnir_worker_serving Workers serving the variant now.
# TYPE sleipnir_worker_serving gauge
sleipnir_worker_serving{pipeline="p",task="a",variant="old"} 0
sleipnir_worker_serving{pipeline="p",task="a",variant="x"} 2
# HELP sleipnir_worker_workers Workers in this process, by whether they serve a variant: serving, idle, or failing (they cannot serve their assignment: a variant that failed to load; they keep trying).
# TYPE sleipnir_worker_workers gauge
sleipnir_worker_workers{state="failing"} 1
sleipnir_worker_workers{state="idle"} 1
sleipnir_worker_workers{state="serving"} 2
# HELP sleipnir_worker_deadlettered_total Task messages set aside in the dead-letter stream, by reason (redelivered, undecodable).
# TYPE sleipnir_worker_deadlettered_total counter
sleipnir_worker_deadlettered_total{reason="redelivered"} 1
sleipnir_worker_deadlettered_total{reason="undecodable"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sleipnir_worker_items_total",
		"sleipnir_worker_subrequests_total", "sleipnir_worker_serving", "sleipnir_worker_workers",
		"sleipnir_worker_deadlettered_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m, "sleipnir_worker_dropped_items_total"); n != 2*len(wire.DropReasons) {
		t.Errorf("%d drop series, want one per reason per variant (%d)", n, 2*len(wire.DropReasons))
	}
}

func TestTunerLoansAreSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewPlanner(reg, func() PlannerState {
		return PlannerState{Lent: map[string]map[string]int{"traffic": {"detect/yolov5x": 3}}}
	})
	want := `
# HELP sleipnir_tuner_lent_workers Idle workers the tuner lends a variant on top of the plan's replicas (pkg/tuner).
# TYPE sleipnir_tuner_lent_workers gauge
sleipnir_tuner_lent_workers{pipeline="traffic",task="detect",variant="yolov5x"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sleipnir_tuner_lent_workers"); err != nil {
		t.Fatal(err)
	}
}

// TestDroppedMessagesAreCounters: the drops over the subscriptions' pending limits are exported, summed over the
// frontends of a process.
func TestDroppedMessagesAreCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := NewFrontend(reg)
	f.AddSource(func() FrontendCounts { return FrontendCounts{DroppedRequests: 5, DroppedResults: 1} })
	f.AddSource(func() FrontendCounts { return FrontendCounts{DroppedRequests: 2, DroppedControl: 3} })
	NewPlanner(reg, func() PlannerState { return PlannerState{DroppedReports: 4} })
	want := `
# HELP sleipnir_frontend_dropped_control_total Micro protocol requests ($SRV.*) dropped over their subscriptions' pending limits.
# TYPE sleipnir_frontend_dropped_control_total counter
sleipnir_frontend_dropped_control_total 3
# HELP sleipnir_frontend_dropped_requests_total Requests dropped unanswered over the request subscription's pending limits (a flood).
# TYPE sleipnir_frontend_dropped_requests_total counter
sleipnir_frontend_dropped_requests_total 7
# HELP sleipnir_frontend_dropped_results_total Result messages dropped over the result subscription's pending limits.
# TYPE sleipnir_frontend_dropped_results_total counter
sleipnir_frontend_dropped_results_total 1
# HELP sleipnir_planner_dropped_reports_total Demand reports dropped over the subscription's pending limits (the planner fell behind).
# TYPE sleipnir_planner_dropped_reports_total counter
sleipnir_planner_dropped_reports_total 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sleipnir_frontend_dropped_control_total",
		"sleipnir_frontend_dropped_requests_total", "sleipnir_frontend_dropped_results_total",
		"sleipnir_planner_dropped_reports_total"); err != nil {
		t.Fatal(err)
	}
}
