package control

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// Flags are the control flags: which system runs (--policy) and how its control loop is tuned. The planner, up and
// the simulator register the same set, so that a simulated run can be run live with the same words.
type Flags struct {
	systems        *string
	replanEvery    *time.Duration
	replanSigmas   *float64
	routeSigmas    *float64
	headroom       *float64
	utilization    *float64
	solveTimeLimit *time.Duration
	solveWorkers   *int
	tuneEvery      *time.Duration
	measured       *bool
	latencyModel   *string
	sharing        *string
	check          *bool
	checkEdge      *bool
	checkTarget    *float64
	maxCost        *float64
	gears          *bool
	gearBatches    *bool
}

// RegisterFlags registers the control flags on fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	return &Flags{
		systems: fs.String("policy", "loki", "the system that plans: "+SystemSyntax+"; the simulator takes several, "+
			"comma-separated, and simulates each"),
		replanEvery: fs.Duration("replan-every", 0, "how often the allocation is solved again (0: 10s)"),
		replanSigmas: fs.Float64("replan-sigmas", 0, "a due re-plan only on moves of the demand estimate beyond "+
			"this many standard deviations of its Poisson noise (0: off)"),
		routeSigmas: fs.Float64("route-sigmas", 0, "re-route only on moves of the estimate beyond this many standard "+
			"deviations of its noise (0: off)"),
		headroom: fs.Float64("headroom", DefaultHeadroom, "size plans for this much more than the demand "+
			"estimate where the cluster has the servers for it (0.1: 10%), and re-plan at once when the estimate "+
			"outgrows them (0: sized for the estimate)"),
		utilization: fs.Float64("utilization", 0, "share of each variant's capacity plans and routing use (0: 0.85)"),
		solveTimeLimit: fs.Duration("solve-time-limit", 0, "time limit of each allocation solve (0: 1s live; none in "+
			"the simulator, whose runs must not depend on the machine's speed)"),
		solveWorkers: fs.Int("solve-workers", 0, "branch-and-bound nodes a solve works on at once (0: one per CPU "+
			"live; one in the simulator, whose runs must not depend on the machine's CPUs)"),
		tuneEvery: fs.Duration("tune-every", 0, "how often the tuner looks at the queues between plans and lends "+
			"idle workers to variants whose queues outgrow their replicas (0: 100ms; negative: no tuner)"),
		measured: fs.Bool("measured-latency", true, "plan and route with the batch latencies the workers measure, "+
			"blended with the profiles (false: with the profiles alone)"),
		latencyModel: fs.String("latency-model", string(allocate.LatencyBurst), "the allocation MILP's latency "+
			"model: burst (budgets the bursts a fan-out sends and keeps queueing headroom) or loki (the paper's "+
			"formulation: profiled latencies within half the SLO, no burst terms; implies --measured-latency=false)"),
		sharing: fs.String("sharing", "", "how several pipelines share the workers: joint (one allocation over "+
			"every pipeline; the default of loki) or even (an even split, each pipeline planned alone on its share; "+
			"the baselines')"),
		check: fs.Bool("check", false, "check each plan by simulating it on the traffic observed before it is "+
			"published: tighten it where queues form when it misses --check-target, try the paper's model's "+
			"more accurate plan when there is room (loki only)"),
		checkEdge: fs.Bool("check-edge", true, "check the plans in accuracy mode, which have no headroom, as "+
			"--check checks every plan (false: none, unless --check)"),
		checkTarget: fs.Float64("check-target", DefaultCheckTarget, "the share of requests a checked plan may be "+
			"predicted to miss"),
		maxCost: fs.Float64("max-cost", 0, "cap on each plan's cost, `PER_HOUR` (needs --price; one pipeline): "+
			"the most accurate plan within it when the cheapest full-accuracy plan costs more (0: none)"),
		gears: fs.Bool("gears", false, "give each cascade plan a placement for a range of load (up to 3 times the "+
			"demand, as accurate at it) and its gear table, which the cascade's workers switch between as their load "+
			"moves, re-planning only past the range (pkg/gears; off: the plan's threshold holds until the next plan; "+
			"docs/cascades.md#gears)"),
		gearBatches: fs.Bool("gear-batches", false, "with --gears, let each gear run the cascade's variants at "+
			"larger max batches where the latency budget has the time, counted in what the gear carries "+
			"(docs/cascades.md#gears)"),
	}
}

// Config is the control loop's configuration the flags give; zero values are the loop's defaults, left for the
// planner or the simulator to fill.
func (f *Flags) Config() (Config, error) {
	c := Config{ReplanEvery: *f.replanEvery, ReplanSigmas: *f.replanSigmas, RouteSigmas: *f.routeSigmas,
		Headroom: *f.headroom, RouteUtilization: *f.utilization, SolveTimeLimit: *f.solveTimeLimit,
		SolveWorkers: *f.solveWorkers, TuneEvery: *f.tuneEvery,
		ProfilesOnly: !*f.measured, Sharing: *f.sharing, CheckTarget: *f.checkTarget,
		MaxCostPerHour: *f.maxCost, Gears: *f.gears, GearBatches: *f.gearBatches}
	switch {
	case *f.check:
		c.Check = CheckAll
	case !*f.checkEdge:
		c.Check = CheckNone // else the default, CheckEdge
	}
	var err error
	if c.LatencyModel, err = allocate.ParseLatencyModel(*f.latencyModel); err != nil {
		return c, fmt.Errorf("--latency-model: %w", err)
	}
	if c.Headroom == 0 {
		c.Headroom = -1 // none (Config's 0 is its default)
	}
	switch {
	case c.Sharing != "" && c.Sharing != SharingJoint && c.Sharing != SharingEven:
		return c, fmt.Errorf("--sharing %q: want %s or %s", c.Sharing, SharingJoint, SharingEven)
	case c.ReplanEvery < 0:
		return c, fmt.Errorf("--replan-every %v: want a positive duration", c.ReplanEvery)
	case c.ReplanSigmas < 0 || c.RouteSigmas < 0:
		return c, errors.New("--replan-sigmas and --route-sigmas must not be negative")
	case *f.headroom < 0:
		return c, fmt.Errorf("--headroom %v: want 0 or more", *f.headroom)
	case c.RouteUtilization < 0 || c.RouteUtilization > 1:
		return c, fmt.Errorf("--utilization %v: want a share in (0, 1]", c.RouteUtilization)
	case c.SolveTimeLimit < 0:
		return c, fmt.Errorf("--solve-time-limit %v: want 0 or more", c.SolveTimeLimit)
	case !(c.CheckTarget > 0 && c.CheckTarget < 1):
		return c, fmt.Errorf("--check-target %v: want a share in (0, 1)", c.CheckTarget)
	case c.MaxCostPerHour < 0 || math.IsNaN(c.MaxCostPerHour) || math.IsInf(c.MaxCostPerHour, 0):
		return c, fmt.Errorf("--max-cost %v: want a cost per hour > 0 (0: none)", c.MaxCostPerHour)
	case c.SolveWorkers < 0:
		return c, fmt.Errorf("--solve-workers %d: want 0 or more", c.SolveWorkers)
	}
	return c, nil
}

// Systems are the system names --policy gives (comma-separated), not yet checked: see ParseSystem.
func (f *Flags) Systems() []string {
	var out []string
	for _, s := range strings.Split(*f.systems, ",") {
		out = append(out, strings.TrimSpace(s))
	}
	return out
}

// System is the one system --policy names, for a planner (which runs one), checked for each of specs.
func (f *Flags) System(specs ...*pipeline.Spec) (string, error) {
	s := f.Systems()
	if len(s) != 1 {
		return "", fmt.Errorf("--policy %q: the planner runs one system", *f.systems)
	}
	for _, spec := range specs {
		if _, err := ParseSystem(s[0], spec, Config{}); err != nil {
			return "", fmt.Errorf("--policy: %w", err)
		}
	}
	return s[0], nil
}
