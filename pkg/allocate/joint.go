// Several pipelines on one cluster: each pipeline's model of a step (build), written side by side into one MILP
// whose servers row they share, solved class by class as schemas/README.md "### Priorities" states.

package allocate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// JointInput is the allocation of several pipelines on one cluster.
type JointInput struct {
	// Pipelines are the pipelines to serve, each with its spec, demand and settings (its Servers is ignored: the
	// cluster's is below). A pipeline's class is its Spec.Priority.
	Pipelines []Input
	// Servers is the cluster's size, all of the default class; Cluster, when set, replaces it: the servers per
	// class and their prices, shared by the pipelines (one servers row per class).
	Servers int
	Cluster plan.Cluster
	// HardwareOnly asks for the hardware mode alone: when not every pipeline fits at its most accurate, SolveJoint
	// returns ErrNotHardware rather than solving the accuracy steps (the planner sizes a plan with headroom only
	// when it stays in hardware mode).
	HardwareOnly bool
	// wholeMILP solves every accuracy step as one joint MILP, without the decomposition over the servers
	// (jointsplit.go): its cross-check.
	wholeMILP bool
	// pricedBound bounds a decomposed accuracy step on two server classes by pricing one class's servers even where
	// the exact knapsack over both counts is cheap (jointclasses.go): its check on small cases.
	pricedBound bool
}

// ErrNotHardware says a JointInput.HardwareOnly allocation does not fit in hardware mode.
var ErrNotHardware = errors.New("allocate: the pipelines do not all fit at their most accurate")

// JointResult is a joint allocation: per pipeline, in JointInput.Pipelines' order, a Result (its Mode and
// ServersUsed are the pipeline's own, its Servers the cluster's, its SolveMs and Nodes the joint solve's).
type JointResult struct {
	Servers     int `json:"servers"`
	ServersUsed int `json:"servers_used"`
	// UsedByClass is the servers the pipelines use per class, and CostPerHour their price (0 when unpriced).
	UsedByClass map[string]int `json:"servers_used_by_class,omitempty"`
	CostPerHour float64        `json:"cost_per_hour"`
	Pipelines   []*Result      `json:"pipelines"`
	Optimal     bool           `json:"optimal"`
	Gap         float64        `json:"gap"`
	SolveMs     float64        `json:"solve_ms"`
	Nodes       int            `json:"nodes"`
}

// jointPart is one pipeline's model in a joint MILP.
type jointPart struct {
	p      int // index in JointInput.Pipelines
	m      *model
	class  int
	weight float64 // its share of its class's objective: its demand over the class's
	off    int     // its first column in the joint MILP
	mode   string
	served float64
}

// jointSolve is the state of SolveJoint: the pipelines kept in the joint MILP (classes planned in the accuracy or
// overloaded modes, re-solved with every lower class under floors on what they got) and each class's level.
type jointSolve struct {
	in    JointInput
	opt   Options
	res   *JointResult
	kept  []*jointPart
	level map[int]float64 // per class kept: the accuracy it was planned at (objective of jointObjective)
	sol   milp.Result     // the last joint solve, which holds kept
	start time.Time       // when SolveJoint started
}

// SolveJoint allocates the cluster between several pipelines. Class by class from the highest: every pipeline of
// the class at its most accurate with the fewest servers (hardware scaling) while no higher class needed accuracy
// scaling; otherwise the most accuracy served per second across the class at all its demand (accuracy scaling); and
// when not even that fits, the most requests per second across the class, then the most accuracy at them
// (overloaded). Each higher class keeps what it got (its demand, and its accuracy up to levelTolerance) while a
// lower one is planned, so a lower class gives up accuracy first and is shed first. One pipeline gets Solve's plan.
// A pipeline in the accuracy step is reported in ModeAccuracy even where it got its most accurate variants, and one
// its class could not serve in full in ModeOverloaded (its MaxServableQPS is what it is served; Options.MaxServable
// is not computed). A model past MaxFlowColumns, whose columns are priced, is refused (ErrModelTooLarge).
func SolveJoint(in JointInput, opt Options) (*JointResult, error) {
	start := time.Now()
	if err := in.check(); err != nil {
		return nil, err
	}
	if err := opt.check(); err != nil {
		return nil, err
	}
	s := &jointSolve{in: in, opt: opt, start: start, level: map[int]float64{},
		res: &JointResult{Servers: in.cluster().Total(), Optimal: true, Pipelines: make([]*Result, len(in.Pipelines))}}
	left := append(plan.Cluster(nil), in.cluster()...)
	for _, class := range in.classes() {
		var members []int
		for p := range in.Pipelines {
			if in.Pipelines[p].Spec.Priority == class {
				members = append(members, p)
			}
		}
		if len(s.kept) == 0 {
			used, err := s.hardware(members, left)
			if err != nil {
				return nil, err
			}
			if used != nil {
				left = without(left, used)
				continue
			}
		}
		if in.HardwareOnly {
			return nil, ErrNotHardware
		}
		if err := s.accuracy(members, class, left); err != nil {
			return nil, err
		}
	}
	for _, pt := range s.kept {
		s.read(pt, s.sol)
	}
	s.res.UsedByClass = map[string]int{}
	for _, r := range s.res.Pipelines {
		r.SolveMs = float64(time.Since(start).Microseconds()) / 1000
		r.Nodes = s.res.Nodes
		s.res.ServersUsed += r.ServersUsed
		for class, n := range r.UsedByClass {
			s.res.UsedByClass[class] += n
		}
	}
	s.res.CostPerHour = math.Round(in.cluster().Cost(s.res.UsedByClass)*1e9) / 1e9
	s.res.SolveMs = float64(time.Since(start).Microseconds()) / 1000
	return s.res, nil
}

// check says what is wrong with in, if anything.
func (in JointInput) check() error {
	if len(in.Pipelines) == 0 {
		return errors.New("allocate: no pipelines to allocate")
	}
	seen := map[string]bool{}
	for _, p := range in.Pipelines {
		p.Servers, p.Cluster = 0, in.cluster()
		if err := p.check(); err != nil {
			return err
		}
		if seen[p.Spec.Name] {
			return fmt.Errorf("allocate: pipeline %q given twice", p.Spec.Name)
		}
		seen[p.Spec.Name] = true
	}
	return nil
}

// classes are the pipelines' priority classes, the highest first.
func (in JointInput) classes() []int {
	var out []int
	for _, p := range in.Pipelines {
		if !slices.Contains(out, p.Spec.Priority) {
			out = append(out, p.Spec.Priority)
		}
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

// cluster is the servers the pipelines share: Cluster, or Servers servers of the default class.
func (in JointInput) cluster() plan.Cluster {
	if len(in.Cluster) > 0 {
		return in.Cluster
	}
	return plan.Uniform(in.Servers)
}

// without is cluster c less the servers used per class (its classes kept, with no servers left maybe).
func without(c plan.Cluster, used map[string]int) plan.Cluster {
	out := append(plan.Cluster(nil), c...)
	for i := range out {
		out[i].Servers -= used[out[i].Name]
	}
	return out
}

// fits says the servers used per class fit cluster c.
func fits(c plan.Cluster, used map[string]int) bool {
	for class, n := range used {
		if n > c.Servers(class) {
			return false
		}
	}
	return true
}

// pipeline is pipeline p's input on a cluster of servers.
func (s *jointSolve) pipeline(p int, servers plan.Cluster) Input {
	in := s.in.Pipelines[p]
	in.Servers, in.Cluster = servers.Total(), servers
	return in
}

// hardware plans the pipelines members at their most accurate at the least cost (the fewest servers when unpriced),
// out of left, and returns the servers they use per class; nil when they do not all fit. The step's MILPs are
// independent but for the servers they share, and each minimises its own: together they fit when the sum of their
// optima does. On several classes the optima may not fit together where other plans do (two pipelines wanting the
// same cheap class): the step's models are then solved side by side, their costs summed.
func (s *jointSolve) hardware(members []int, left plan.Cluster) (map[string]int, error) {
	used := map[string]int{}
	var parts []*jointPart
	var sols []milp.Result
	for _, p := range members {
		m, err := build(s.pipeline(p, left), stepHardware)
		if err != nil {
			return nil, nil // as Solve: no hardware plan, accuracy scaling decides
		}
		parts = append(parts, &jointPart{p: p, m: m, mode: ModeHardware, served: s.in.Pipelines[p].Demand})
	}
	if len(left) >= 2 && len(parts) >= 2 && !relaxationFits(parts, left) {
		return nil, nil // each pipeline's MILP on classes takes tens of milliseconds: skipped when none can fit
	}
	for _, pt := range parts {
		sol, err := pt.m.solve(s.opt)
		s.res.Nodes += sol.Nodes
		if err != nil {
			return nil, err
		}
		if sol.X == nil {
			return nil, nil
		}
		for class, n := range pt.m.usedByClass(sol.X) {
			used[class] += n
		}
		sols = append(sols, sol)
	}
	if !fits(left, used) {
		if len(left) < 2 || len(parts) < 2 {
			return nil, nil
		}
		return s.hardwareTogether(parts, left)
	}
	for i, pt := range parts {
		s.read(pt, sols[i])
	}
	return used, nil
}

// relaxationFits says the LP relaxation of parts' models side by side on the servers left has a point (true when
// Clp cannot tell): without one, no plan of theirs fits together.
func relaxationFits(parts []*jointPart, left plan.Cluster) bool {
	p, err := jointProblem(parts, left)
	if err != nil {
		return true
	}
	lp, err := milp.NewParametricLPOver(p)
	if err != nil {
		return true
	}
	ok, feasible, _, _ := lp.AtPoint(nil)
	return !ok || feasible
}

// accuracy plans class's pipelines members on the servers left, with the classes kept: all their demand at the
// most accuracy served, or when that does not fit, the most demand and then the most accuracy at it.
func (s *jointSolve) accuracy(members []int, class int, left plan.Cluster) error {
	var parts []*jointPart
	total := 0.0
	for _, p := range members {
		total += s.in.Pipelines[p].Demand
	}
	// The pipelines' models are built at once on the options' workers (tens of milliseconds at 20 pipelines).
	models, errs := make([]*model, len(members)), make([]error, len(members))
	inParallel(s.opt.workers(), len(members), func(i int) {
		models[i], errs[i] = s.build(members[i], left, stepAccuracy)
	})
	for i, p := range members {
		m, err := models[i], errs[i]
		if err != nil {
			return err
		}
		if m == nil { // too few servers left for all the class's demand
			parts = nil
			break
		}
		parts = append(parts, &jointPart{p: p, m: m, class: class, weight: share(s.in.Pipelines[p].Demand, total,
			len(members)), mode: ModeAccuracy, served: s.in.Pipelines[p].Demand})
	}
	if len(parts) > 0 {
		sol, err := s.solveAccuracy(parts, class, left)
		if err != nil || sol.X != nil {
			return err
		}
	}
	served, err := s.maxDemand(members, class, left)
	if err != nil {
		return err
	}
	parts, total = parts[:0], 0
	for i := range members {
		total += served[i]
	}
	for i, p := range members {
		if served[i] <= 0 {
			s.res.Pipelines[p] = s.shed(p)
			continue
		}
		at := s.pipeline(p, left)
		at.Demand = served[i] * (1 - 1e-7) // just inside, as Solve: tolerances must not make it infeasible
		at.headroomDemand = s.in.Pipelines[p].Demand
		m, err := build(at, stepAccuracy)
		if err != nil { // not expected: its max-demand model served it
			return err
		}
		mode := ModeOverloaded
		if served[i] >= s.in.Pipelines[p].Demand*(1-1e-6) {
			mode = ModeAccuracy // its class is short, it is not
		}
		parts = append(parts, &jointPart{p: p, m: m, class: class, weight: share(served[i], total, len(members)),
			mode: mode, served: at.Demand})
	}
	if len(parts) == 0 {
		return nil
	}
	sol, err := s.solveAccuracy(parts, class, left)
	if err == nil && sol.X == nil {
		err = fmt.Errorf("allocate: no joint allocation for the demand found servable in class %d", class)
	}
	return err
}

// build is pipeline p's model of step st on the servers left; nil when they cannot host it though the cluster could
// (the pipeline is then shed), an error when not even the cluster could.
func (s *jointSolve) build(p int, left plan.Cluster, st step) (*model, error) {
	m, err := build(s.pipeline(p, left), st)
	if err == nil || left.Total() == s.in.cluster().Total() {
		return m, err
	}
	if _, errAll := build(s.pipeline(p, s.in.cluster()), st); errAll != nil {
		return nil, errAll
	}
	return nil, nil
}

// share is a pipeline's weight in its class: its demand over the class's (alike when there is none).
func share(d, total float64, n int) float64 {
	if total <= 0 {
		return 1 / float64(n)
	}
	return d / total
}

// maxDemand is, per pipeline of members, the demand it is served when the class serves the most requests per
// second it can on the servers left, the classes kept keeping theirs.
func (s *jointSolve) maxDemand(members []int, class int, left plan.Cluster) ([]float64, error) {
	var parts []*jointPart
	for _, p := range members {
		m, err := s.build(p, left, stepMaxDemand)
		if err != nil {
			return nil, err
		}
		if m == nil {
			continue // shed: the servers left cannot host it
		}
		parts = append(parts, &jointPart{p: p, m: m, class: class})
	}
	served := make([]float64, len(members))
	if len(parts) == 0 {
		return served, nil
	}
	sol, err := s.solveWith(parts, class, left, true)
	if err != nil {
		return nil, err
	}
	if sol.X == nil {
		return served, nil
	}
	for _, pt := range parts {
		i := slices.Index(members, pt.p)
		served[i] = sol.X[pt.off+pt.m.demandCol]
		s.res.Pipelines[pt.p] = &Result{MaxServableQPS: served[i]} // read keeps it
	}
	return served, nil
}

// shed is the result of pipeline p when its class has no servers for it.
func (s *jointSolve) shed(p int) *Result {
	in := s.in.Pipelines[p]
	lm, _ := ParseLatencyModel(string(in.LatencyModel))
	return &Result{Mode: ModeOverloaded, Demand: in.Demand, Servers: s.res.Servers, Optimal: true, LatencyModel: lm}
}

// read fills the result of part pt from the joint solution sol.
func (s *jointSolve) read(pt *jointPart, sol milp.Result) {
	in := s.in.Pipelines[pt.p]
	r := &Result{Mode: pt.mode, Demand: in.Demand, Servers: s.res.Servers, ServedQPS: pt.served, Optimal: true}
	if prev := s.res.Pipelines[pt.p]; prev != nil {
		r.MaxServableQPS = prev.MaxServableQPS
	}
	if pt.mode != ModeOverloaded {
		r.MaxServableQPS = 0
	}
	r.LatencyModel, _ = ParseLatencyModel(string(in.LatencyModel))
	n := pt.m.prob.NumCols()
	pt.m.read(milp.Result{Status: sol.Status, Gap: sol.Gap, X: sol.X[pt.off : pt.off+n]}, r)
	s.res.Pipelines[pt.p] = r
	s.res.Optimal = s.res.Optimal && r.Optimal
	s.res.Gap = max(s.res.Gap, r.Gap)
}
