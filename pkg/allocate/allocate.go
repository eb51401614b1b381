// Package allocate is Loki's resource manager (section 4.1 of the paper): which model variants to host, with how
// many replicas and which maximum batch size, so that the cluster serves the demand with the fewest servers at full
// accuracy (hardware scaling) or, when it cannot, with the highest system accuracy (accuracy scaling). It builds the
// MILP and solves it with pkg/milp. Pure: no NATS; the planner service and the plan command call it.
//
// The files follow a solve (README.md beside them explains the model, the search and what was measured):
//   - allocate.go: Input, Options, Solve (the steps, in order) and WriteLP;
//   - formulation.go: the MILP of one step, its columns and rows (build);
//   - paths.go: chains, paths of variants, and the flow columns that carry a path's traffic at batch sizes that
//     fit its latency budget (the paper's constraint 7);
//   - burst.go: the burst model (budgeted latencies, replicas a burst needs, queueing headroom);
//   - pricing.go: flow columns generated as the LPs need them, for models too large to list them all;
//   - heuristics.go, hardware.go: first points for branch-and-bound, and step 1 solved by enumeration;
//   - result.go: a solution read back into a Result, and the plan workers follow;
//   - export.go: the paper's own formulation, for the cross-check with CBC;
//   - joint.go, jointmilp.go: several pipelines on one cluster (SolveJoint), their models side by side;
//   - jointsplit.go, splitfunc.go: the joint accuracy step decomposed over the servers (a knapsack over each
//     pipeline's best objective as a function of its servers).
package allocate

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// Input is one allocation problem.
type Input struct {
	Spec *pipeline.Spec
	// Demand is the request rate at the root task, in requests per second.
	Demand float64
	// Servers is the cluster size: how many workers (one variant replica each) there are, all of the default class
	// (wire.DefaultClass). Cluster, when set, replaces it.
	Servers int
	// Cluster is the servers per class, with their hourly prices (plan.Cluster; docs/classes.md). A variant runs on
	// the class its name says (wire.ClassOf: "model@class"); the replicas of a class's variants fit its servers; the
	// hardware step minimises the price of the servers used (their number when none is priced). Unset: Servers
	// servers of the default class.
	Cluster plan.Cluster
	// MaxCostPerHour, when positive, caps the price of the servers a plan uses: the accuracy step finds the most
	// accurate plan within it.
	MaxCostPerHour float64
	// SLOMs overrides the spec's SLO when positive.
	SLOMs float64
	// Fanout optionally overrides multiplicative factors ("task/variant" -> factor), e.g. with what workers
	// measure; the profile's factor is the prior.
	Fanout map[string]pipeline.Fanout
	// MinAccuracy, when positive, is a floor on the system accuracy (the spec's min_accuracy): the plan is the fewest
	// servers (on a priced cluster, the least cost) whose system accuracy is at least it, and when the servers
	// cannot serve the demand at it, the most demand they serve at it (floor.go).
	MinAccuracy float64
	// Utilization is the share of each replica's profiled throughput the plan may use (0 means 1, the paper's
	// formulation). The planner passes its routing's utilization, so that the plan leaves the headroom the routing
	// keeps: a replica fed at its full service rate has an unbounded queue.
	Utilization float64
	// ArrivalDispersion is the requests' index of dispersion: the variance over the mean of their counts in a long
	// window; for a renewal process the squared coefficient of variation of its gaps (pkg/demand
	// TrafficSample.Dispersion). 0 means 1, Poisson arrivals'. The burst model's queueing headroom grows with it
	// (arrivals.headroom): bursty arrivals queue longer at the same load.
	ArrivalDispersion float64
	// LatencyModel is how the MILP models a variant's latency and queueing: LatencyBurst (the default, "") or
	// LatencyLoki, the paper's formulation.
	LatencyModel LatencyModel
	// headroomDemand, when positive, is the demand at which the accuracy and max-demand steps spread headroom
	// (spreadHeadroom) instead of Demand: the allocation of an overloaded cluster's servable demand uses the
	// demand asked for, as the max-demand step that found it did.
	headroomDemand float64
	// listFlows lists every flow column up to MaxFlowColumns, for a whole form to write (WriteLP), where a solve
	// would generate them past priceFlowColumns.
	listFlows bool
	// cascadeNext names the tasks that are a gear's cascade second stage (cascade.go): the hop to one is the same
	// items sent on, not a fan-out, and does not weigh its chain.
	cascadeNext map[string]bool
}

// utilization is the share of throughput a plan may use.
func (in Input) utilization() float64 {
	if in.Utilization <= 0 || in.Utilization > 1 {
		return 1
	}
	return in.Utilization
}

// check says what is wrong with in, if anything.
func (in Input) check() error {
	if in.Spec == nil {
		return errors.New("allocate: no pipeline spec")
	}
	if err := in.checkCluster(); err != nil {
		return err
	}
	if err := in.checkFloor(); err != nil {
		return err
	}
	if in.Demand < 0 || math.IsNaN(in.Demand) || math.IsInf(in.Demand, 0) {
		return fmt.Errorf("allocate: demand %v QPS: want a finite number >= 0", in.Demand)
	}
	if in.ArrivalDispersion < 0 || math.IsNaN(in.ArrivalDispersion) || math.IsInf(in.ArrivalDispersion, 0) {
		return fmt.Errorf("allocate: arrival dispersion %v: want a finite number >= 0", in.ArrivalDispersion)
	}
	if _, err := ParseLatencyModel(string(in.LatencyModel)); err != nil {
		return err
	}
	return nil
}

// LatencyModel names how the allocation MILP budgets a variant's latency and keeps room for queueing.
type LatencyModel string

const (
	// LatencyBurst is the burst model (burst.go): a task below the root is budgeted for the rounds its parent's
	// 95th-percentile burst of sub-requests takes, hosts the replicas that burst needs, and keeps a queueing
	// headroom free. It is what holds pipelines with a large fan-out within their SLO.
	LatencyBurst LatencyModel = "burst"
	// LatencyLoki is the paper's formulation (HPDC'24, section 4.1), kept so that its results can be reproduced and
	// compared: each variant's profiled batch latency within half the SLO, items one at a time, no burst rows and
	// no headroom beyond Input.Utilization.
	LatencyLoki LatencyModel = "loki"
)

// LatencyModels lists the latency models, for flags' help and errors.
const LatencyModels = "burst or loki"

// ParseLatencyModel reads a latency model's name; "" is the default, LatencyBurst.
func ParseLatencyModel(s string) (LatencyModel, error) {
	switch LatencyModel(s) {
	case "", LatencyBurst:
		return LatencyBurst, nil
	case LatencyLoki:
		return LatencyLoki, nil
	}
	return "", fmt.Errorf("allocate: latency model %q: want %s", s, LatencyModels)
}

// Options tune the solver.
type Options struct {
	// TimeLimit bounds each MILP solve (0: none); a solve that hits it reports Optimal false and its Gap.
	TimeLimit time.Duration
	// MaxNodes bounds the branch-and-bound nodes of each MILP solve (0: pkg/milp's default): with one worker, a
	// bound that gives the same result on any machine, where a time limit does not.
	MaxNodes int
	// MaxServable also computes MaxServableQPS when the demand is servable (it always is when it is not).
	MaxServable bool
	// Workers is how many branch-and-bound nodes are solved at once (0: runtime.GOMAXPROCS, one per CPU). With
	// more than one, which of several equally good allocations is returned may vary from run to run.
	Workers int
	// Gap is the optimality tolerance of each MILP solve, relative: a result is Optimal when no allocation can beat
	// it by more than this share of its objective. 0 means pkg/milp's default, 1e-6; it must be below 1.
	Gap float64
}

// check says what is wrong with o, if anything.
func (o Options) check() error {
	if !(o.Gap >= 0 && o.Gap < 1) {
		return fmt.Errorf("allocate: optimality gap %v: want a share in [0, 1)", o.Gap)
	}
	return nil
}

// workers is Workers, or one per CPU.
func (o Options) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// Modes of an allocation (the plan's).
const (
	ModeHardware   = plan.ModeHardware
	ModeAccuracy   = plan.ModeAccuracy
	ModeOverloaded = plan.ModeOverloaded
)

// ErrNoServers says the cluster has no servers to allocate.
var ErrNoServers = errors.New("allocate: the cluster has no servers")

// Solve allocates the cluster: hardware scaling if the most accurate variants can serve the demand, accuracy scaling
// otherwise, and when not even that can serve it, the allocation of the largest demand it can serve.
func Solve(in Input, opt Options) (*Result, error) {
	start := time.Now()
	if err := in.check(); err != nil {
		return nil, err
	}
	if err := opt.check(); err != nil {
		return nil, err
	}
	s := &solving{in: in, opt: opt, start: start,
		res: &Result{Demand: in.Demand, Servers: in.servers(), Cluster: reported(in.cluster()), ServedQPS: in.Demand,
			Optimal: true}}
	s.res.LatencyModel, _ = ParseLatencyModel(string(in.LatencyModel)) // checked above
	s.res.MinAccuracy = in.MinAccuracy
	if in.MinAccuracy > 0 {
		return s.solveFloor()
	}

	// Step 1: hardware scaling.
	if m, err := build(in, stepHardware); err == nil {
		sol, err := s.solveModel(m)
		if err != nil {
			return nil, err
		}
		if sol.X != nil {
			return s.served(m, sol, ModeHardware)
		}
	}
	// Step 2: accuracy scaling.
	m, err := build(in, stepAccuracy)
	if err != nil {
		return nil, err
	}
	sol, err := s.solveModel(m)
	if err != nil {
		return nil, err
	}
	if sol.X == nil && sol.Status == milp.Limit {
		// Stopped before it found a point: a plan all the same (a live planner publishes what it has), with the
		// gap to the search's bound.
		sol = m.fallback(sol)
	}
	if sol.X != nil {
		return s.served(m, sol, ModeAccuracy)
	}
	return s.overloaded(sol)
}

// solving is one call of Solve: its input and options, the result it fills in, and what it counts over its steps.
type solving struct {
	in    Input
	opt   Options
	res   *Result
	start time.Time
	nodes int // branch-and-bound nodes over every model solved
}

// finish records the time and nodes the solve took in r.
func (s *solving) finish(r *Result) (*Result, error) {
	r.SolveMs = float64(time.Since(s.start).Microseconds()) / 1000
	r.Nodes = s.nodes
	return r, nil
}

// solveModel solves m, counting its nodes.
func (s *solving) solveModel(m *model) (milp.Result, error) {
	sol, err := m.solve(s.opt)
	s.nodes += sol.Nodes
	return sol, err
}

// maxServable solves the max-demand step: the largest demand the servers serve, and its model and point (nil when it
// found none).
func (s *solving) maxServable() (float64, *model, []float64, error) {
	m, err := build(s.in, stepMaxDemand)
	if err != nil {
		return 0, nil, nil, err
	}
	sol, err := s.solveModel(m)
	if err != nil {
		return 0, nil, nil, err
	}
	if sol.Status == milp.Infeasible || sol.X == nil {
		return 0, nil, nil, nil
	}
	s.res.Optimal = s.res.Optimal && sol.Status == milp.Optimal
	s.res.Gap = max(s.res.Gap, sol.Gap)
	return sol.Objective, m, sol.X, nil
}

// served is the allocation of a step that serves the demand.
func (s *solving) served(m *model, sol milp.Result, mode string) (*Result, error) {
	res := s.res
	m.read(sol, res)
	res.Mode = mode
	if s.opt.MaxServable {
		var err error
		if res.MaxServableQPS, _, _, err = s.maxServable(); err != nil {
			return nil, err
		}
	}
	return s.finish(res)
}

// overloaded is the allocation when the accuracy step found no point (sol): overloaded, or a search stopped with
// nothing better to offer. It allocates for the most these servers can serve.
func (s *solving) overloaded(sol milp.Result) (*Result, error) {
	in, res := s.in, s.res
	dmax, mmax, xmax, err := s.maxServable()
	if err != nil {
		return nil, err
	}
	if sol.Status == milp.Limit && dmax >= in.Demand*(1-1e-9) && xmax != nil &&
		mmax.prob.Violation(scaleFlows(mmax, xmax, in.Demand)) <= 1e-6 {
		// The demand is servable: the max-demand step's point, its flows scaled down to it.
		mmax.read(milp.Result{Status: milp.Limit, X: scaleFlows(mmax, xmax, in.Demand)}, res)
		res.Mode, res.MaxServableQPS = ModeAccuracy, dmax
		res.Gap = max(res.Gap, accuracyGap(sol.Bound, res.SystemAccuracy))
		return s.finish(res)
	}
	res.MaxServableQPS = dmax
	res.Mode = ModeOverloaded
	if dmax <= 0 {
		return s.finish(res)
	}
	at := in
	at.Demand = dmax * (1 - 1e-7) // just inside, so that tolerances do not make it infeasible
	at.headroomDemand = in.Demand
	m, err := build(at, stepAccuracy)
	if err != nil {
		return nil, err
	}
	if sol, err = s.solveModel(m); err != nil {
		return nil, err
	}
	if sol.X != nil {
		m.read(sol, res)
	} else {
		// Stopped before it found a point: the max-demand step's own, which serves that demand.
		mmax.read(milp.Result{Status: milp.Limit, X: scaleFlows(mmax, xmax, at.Demand)}, res)
		res.Gap = max(res.Gap, accuracyGap(sol.Bound, res.SystemAccuracy))
	}
	res.ServedQPS = at.Demand
	return s.finish(res)
}

// scaleFlows is point x of model m with its continuous columns (the demand, flows, spills) scaled to demand d: a
// point that serves more serves less on the same replicas, every row being linear in the flows.
func scaleFlows(m *model, x []float64, d float64) []float64 {
	out := append([]float64(nil), x...)
	f := d / max(x[m.demandCol], 1e-12)
	for j, integer := range m.prob.Integer {
		if !integer {
			out[j] *= f
		}
	}
	return out
}

// WriteLP writes the accuracy-scaling MILP of in (Solve's step 2: every variant, the highest system accuracy that
// serves in.Demand) in LP format: to read, or to solve with another solver (cbc FILE solve). A model past
// MaxFlowColumns generates its flow columns as it solves and has no whole form to write: ErrModelTooLarge.
func WriteLP(w io.Writer, in Input) error {
	if err := in.check(); err != nil {
		return err
	}
	in.listFlows = true
	m, err := build(in, stepAccuracy)
	if err != nil {
		return err
	}
	if m.priced {
		return fmt.Errorf("%w: its flow columns are generated while solving, so it has no whole LP form to write",
			ErrModelTooLarge)
	}
	return milp.WriteLP(w, m.prob)
}

// solve runs branch-and-bound on the model, from a first point found by a heuristic.
func (m *model) solve(opt Options) (milp.Result, error) {
	if m.step == stepHardware {
		if res, ok := m.enumerateHardware(); ok {
			if res.X == nil || m.prob.Violation(res.X) <= 1e-6 {
				return res, nil
			}
			// Not expected: the enumeration's point breaks the model. The MILP decides.
		}
	}
	return milp.Solve(m.prob, m.milpOptions(opt))
}

// firstPointGrace is how many time limits more a solve may take to find its first point. Without, a joint plan of
// 20 pipelines on 400 servers under the live planner's 1 s found none in its accuracy step, took the step for
// infeasible, and served 66% of a demand that fits (BenchmarkJointAtScale).
const firstPointGrace = 4

// milpOptions are the branch-and-bound's options for the model: its first point (or the heuristic that finds one
// from the root's LP), pricer and tolerances.
func (m *model) milpOptions(opt Options) milp.Options {
	o := milp.Options{TimeLimit: opt.TimeLimit, MaxNodes: opt.MaxNodes, Pricer: m.pricer(), Workers: opt.workers(),
		RelGap: opt.Gap, FirstPointGrace: firstPointGrace * opt.TimeLimit}
	if m.step == stepHardware {
		o.IntegralObjective = m.integralObjective()
		o.Incumbent = m.hardwareIncumbent()
	} else {
		m.tried = &triedBatches{}
		o.RootHeuristic = func(x []float64, best float64) []float64 { return m.fixedBatchIncumbent(x, best, opt) }
	}
	return o
}
