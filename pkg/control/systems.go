package control

import (
	"fmt"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// System is a serving system by name, as the planner runs it live and the simulator in simulated time: the
// allocator of its control loop (which may route its plans its own way: Router) and the workers' deadline policy.
type System struct {
	// Name is the system's name with its deadline policy, e.g. "loki:reroute".
	Name string
	// Allocator is nil for a static system: the first plan's allocation stands, only its routing follows the demand.
	Allocator Allocator
	Policy    deadline.Policy
	// PlansOnce says the system adapts nothing after its first plan: no tuner lends it idle workers (InferLine's
	// coarse-grained baselines, compared as planners alone).
	PlansOnce bool
}

// SystemKind is an entry of Systems.
type SystemKind struct {
	Name string
	// About says what the system is, for help texts.
	About string
	// New makes its allocator from the MILP options in force; nil: a static system.
	New func(MILP) Allocator
	// Policy is its deadline policy; "" means the pipeline's (its deadline_policy).
	Policy deadline.Policy
	// planningTrace: a coarse-grained baseline, on Config.Traces' trace of the pipeline (for its peak rate if peak).
	planningTrace, peak bool
}

// Systems are the systems ParseSystem knows: Sleipnir's own and the baselines Loki is evaluated against.
var Systems = []SystemKind{
	{Name: "loki", About: "Sleipnir's planner: the allocation MILP for the demand and the live workers",
		New: func(m MILP) Allocator { return m }},
	// InferLine provisions for the tail latency and drops nothing.
	{Name: "inferline", About: "InferLine: the most accurate variant of each task only, hardware scaling",
		New: func(m MILP) Allocator { return NewInferLine(m) }, Policy: deadline.None},
	// Proteus serves each task as a model of its own, with its own share of the SLO, and drops a query that
	// overran it.
	{Name: "proteus", About: "Proteus: each task planned on its own, on its share of the servers",
		New: func(m MILP) Allocator { return Proteus{MILP: m} }, Policy: deadline.PerTask},
	{Name: "static", About: "the pipeline's allocation section for good, routed as the demand moves"},
	// InferLine's coarse-grained baselines (coarse.go) plan once and drop nothing, as InferLine.
	{Name: "cg-mean", About: "InferLine's CG-Mean: the whole pipeline replicated as one unit on one class, for the " +
		"planning trace's mean rate, planned once", Policy: deadline.None, planningTrace: true},
	{Name: "cg-peak", About: "InferLine's CG-Peak: the same unit, for the planning trace's peak rate over a window " +
		"of the SLO, planned once", Policy: deadline.None, planningTrace: true, peak: true},
}

// PlansOnTrace says the system (a name ParseSystem reads) plans once on a planning trace (Config.Traces).
func PlansOnTrace(system string) bool {
	name, _, _ := strings.Cut(system, ":")
	for _, k := range Systems {
		if k.Name == name {
			return k.planningTrace
		}
	}
	return false
}

// SystemSyntax is the syntax of a system name, for flag help and errors.
var SystemSyntax = func() string {
	names := make([]string, len(Systems))
	for i, k := range Systems {
		names[i] = k.Name
	}
	return strings.Join(names, ", ") + ", optionally with a deadline policy, e.g. loki:per-task (defaults: " +
		"loki and static the pipeline's deadline_policy, inferline, cg-mean and cg-peak none, proteus per-task)"
}()

// ParseSystem reads a system name of Systems, optionally followed by ":" and a deadline policy (none, last-task,
// per-task, reroute or degrade) that replaces the system's. Its allocator sizes plans for the routing utilization of cfg
// and solves within its solve limits (zero values are their defaults).
func ParseSystem(s string, spec *pipeline.Spec, cfg Config) (System, error) {
	name, pol, hasPolicy := strings.Cut(s, ":")
	var kind *SystemKind
	for i := range Systems {
		if Systems[i].Name == name {
			kind = &Systems[i]
		}
	}
	if kind == nil {
		return System{}, fmt.Errorf("system %q: want %s", s, SystemSyntax)
	}
	cfg.SetDefaults()
	sys := System{Policy: kind.Policy}
	if kind.planningTrace {
		var trace *PlanningTrace
		if cfg.Traces != nil {
			if t, ok := cfg.Traces.Trace(spec.Name); ok {
				trace = &t
			}
		}
		sys.Allocator, sys.PlansOnce = NewCoarseGrained(kind.peak, trace), true
	}
	if kind.New != nil {
		m := MILP{Utilization: cfg.RouteUtilization, TimeLimit: cfg.SolveTimeLimit, Workers: cfg.SolveWorkers,
			LatencyModel: cfg.LatencyModel, MaxCostPerHour: cfg.MaxCostPerHour}
		sys.Allocator = kind.New(m)
		if cfg.Check != CheckNone && cfg.Checker != nil && kind.Name == "loki" {
			sys.Allocator = cfg.checked(m)
		}
	}
	if sys.Policy == "" {
		sys.Policy = deadline.Policy(spec.DeadlinePolicy)
		if sys.Policy == "" {
			sys.Policy = deadline.Default
		}
	}
	if hasPolicy {
		p, err := deadline.ParsePolicy(pol)
		if err != nil || pol == "" {
			return System{}, fmt.Errorf("system %q: deadline policy %q: want none, last-task, per-task, reroute or degrade", s, pol)
		}
		sys.Policy = p
	}
	sys.Name = name + ":" + string(sys.Policy)
	return sys, nil
}

// checked is the loki allocator m with its plans checked (Config.Check): the paper's latency model is the looser
// plan it tries when the burst model's plan shows room.
func (c Config) checked(m MILP) Checked {
	ck := Checked{Inner: m, Check: c.Checker, Target: c.CheckTarget, Utilization: c.RouteUtilization,
		Budget: c.SolveTimeLimit, AccuracyModeOnly: c.Check == CheckEdge}
	if c.SolveTimeLimit > 0 { // live: the candidates stop at the solve's budget (the simulator has none)
		ck.Now = time.Now
	}
	if m.LatencyModel != allocate.LatencyLoki {
		loose := m
		loose.LatencyModel = allocate.LatencyLoki
		ck.Loose = loose
	}
	return ck
}
