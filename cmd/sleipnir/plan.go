package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/gears"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// runPlan solves the allocation MILP for one demand, or a sweep of demands, and prints it.
func runPlan(args []string) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	var files pipelineFiles
	fs.Var(&files, "pipeline", "pipeline spec YAML `FILE` (required); repeatable: several pipelines share --servers "+
		"in one joint plan")
	servers := fs.String("servers", "20", "the cluster's workers: `N` of the default class, or CLASS=N,... per server "+
		"class (a variant runs on the classes its profiles name: docs/classes.md)")
	prices := fs.String("price", "", "hourly price of one server per class, `CLASS=PER_HOUR,...`: hardware mode "+
		"then minimises the plan's cost, and the plan reports it (a bare --servers N is the class default)")
	maxCost := fs.Float64("max-cost", 0, "cap on the plan's cost, `PER_HOUR` (needs --price): the most accurate plan "+
		"within it")
	minAccuracy := fs.Float64("min-accuracy", 0, "floor on the system accuracy, a `SHARE` in (0, 1] (default: the "+
		"pipeline's min_accuracy): the fewest servers (the least cost, with --price) whose accuracy is at least it")
	var demands demandFlag
	fs.Var(&demands, "demand", "demand at the root task, requests per second: `QPS`, or NAME=QPS once per pipeline "+
		"(with several --pipeline)")
	slo := fs.Duration("slo", 0, "end-to-end SLO (default: the pipeline's)")
	sweep := fs.String("sweep", "", "FROM:TO:STEP demands (QPS) to solve for, printing mode, servers and accuracy for each")
	asJSON := fs.Bool("json", false, "print JSON (one object, or one per line with --sweep)")
	limit := fs.Duration("time-limit", 30*time.Second, "bound on each MILP solve; a solve that reaches it reports its gap")
	gap := fs.Float64("gap", 0, "optimality tolerance of each MILP solve, relative: stop once no plan can be better "+
		"by more than this share (0: 1e-6)")
	lpFile := fs.String("write-lp", "", "also write the accuracy-scaling MILP at --demand to this file, in LP format "+
		"(to read, or to solve with another solver: cbc FILE solve)")
	util := fs.Float64("utilization", 1, "share of each replica's profiled throughput a plan may use (the live planner "+
		"uses its routing's, 0.85; 1 is the paper's formulation)")
	latencyModel := fs.String("latency-model", string(allocate.LatencyBurst), "the MILP's latency model: burst, or "+
		"loki (the paper's formulation: profiled latencies within half the SLO, no burst terms)")
	live := fs.String("live", "", "PIPELINE: instead of solving, show the plan in force of the running system at "+
		"--nats, with each variant's latency as profiled, as the workers measure it and as planned (the blend)")
	check := fs.Bool("check", false, "also show the plan check's prediction for the plan at --demand: the plan "+
		"routed as the planner routes (85% utilization) and simulated on --check-gaps, else on Poisson arrivals")
	checkGaps := fs.String("check-gaps", "", "with --check: a `FILE` of times between arrivals in ms (whitespace-"+
		"separated), replayed at --demand")
	var c common
	c.register(fs, "NATS server(s) of --live")
	noCascade := fs.Bool("no-cascade", false, "serve every task as if it declared no cascade (the same pipeline without its cascades)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *live != "" {
		return showLivePlan(&c, *live, os.Stdout)
	}
	if len(files) == 0 {
		return errors.New("--pipeline is required")
	}
	specs, err := loadPipelinesCascades(files, !*noCascade)
	if err != nil {
		return err
	}
	in, err := planInput(specs[0], *servers, *slo, *util, *latencyModel)
	if err != nil {
		return err
	}
	if in.Cluster, err = parseCluster(*servers, *prices); err != nil {
		return err
	}
	if *maxCost < 0 || *maxCost > 0 && !in.Cluster.Priced() {
		return fmt.Errorf("--max-cost %v: want a cost per hour > 0, with --price", *maxCost)
	}
	in.MaxCostPerHour = *maxCost
	if in.MinAccuracy, err = minAccuracyOf(specs[0], *minAccuracy); err != nil {
		return err
	}
	qps, err := demands.of(specs)
	if err != nil {
		return err
	}
	opt := allocate.Options{TimeLimit: *limit, Gap: *gap}
	if len(specs) > 1 {
		if *sweep != "" || *lpFile != "" || *maxCost > 0 || *minAccuracy > 0 {
			return errors.New("--sweep, --write-lp, --max-cost and --min-accuracy take one --pipeline")
		}
		return planJoint(in, specs, qps, opt, *asJSON)
	}
	if *sweep == "" {
		in.Demand = qps[0]
		if *check {
			return planChecked(in, opt, *checkGaps, *asJSON)
		}
		return planOne(in, opt, *lpFile, *asJSON)
	}
	if *check {
		return errors.New("--check checks the plan of one --demand; it does not go with --sweep")
	}
	if *lpFile != "" {
		return errors.New("--write-lp writes the model of one --demand; it does not go with --sweep")
	}
	from, to, step, err := parseSweep(*sweep)
	if err != nil {
		return err
	}
	return planSweep(in, opt, from, to, step, *asJSON)
}

// planInput is the allocation problem the flags state for spec on servers: its SLO (0: the pipeline's), the share
// of each replica's throughput a plan may use, and the MILP's latency model.
func planInput(spec *pipeline.Spec, servers string, slo time.Duration, util float64, latencyModel string) (
	allocate.Input, error) {
	if util <= 0 || util > 1 {
		return allocate.Input{}, fmt.Errorf("--utilization %v: want a share in (0, 1]", util)
	}
	model, err := allocate.ParseLatencyModel(latencyModel)
	if err != nil {
		return allocate.Input{}, fmt.Errorf("--latency-model: %w", err)
	}
	cluster, err := parseCluster(servers, "")
	if err != nil {
		return allocate.Input{}, err
	}
	n, _ := plan.ParseServers(servers) // parsed above
	return allocate.Input{Spec: spec, Servers: plan.NewCluster(n, nil).Total(), Cluster: cluster, SLOMs: float64(slo) / float64(time.Millisecond),
		Utilization: util, LatencyModel: model}, nil
}

// planOne solves in and prints its plan (writing its LP first to lpFile, if any).
func planOne(in allocate.Input, opt allocate.Options, lpFile string, asJSON bool) error {
	if lpFile != "" {
		if err := writeLP(lpFile, in); err != nil {
			return err
		}
	}
	opt.MaxServable = true
	r, err := allocate.SolveCascade(in, opt, nil)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(planJSON{in.Spec.Name, r})
	}
	printPlan(r, opt.Gap)
	printGears(in, r)
	return nil
}

// printGears prints the gear table of each cascade r runs (pkg/gears), at the gears' share of the plan's
// utilization (gears.Utilization): what the planner publishes with it; and the table with --gear-batches, where
// it runs other batches.
func printGears(in allocate.Input, r *allocate.Result) {
	p := r.Plan(in.Spec.Name, 0)
	tables := gears.Tables(in.Spec, p, nil, gears.Utilization(in.Utilization), nil)
	batched := gears.Tables(in.Spec, p, nil, gears.Utilization(in.Utilization), &in)
	for _, task := range slices.Sorted(maps.Keys(tables)) {
		fmt.Printf("gears of %s: %s\n", task, gearRows(tables[task]))
		if !slices.EqualFunc(tables[task], batched[task], plan.Gear.Equal) {
			fmt.Printf("gears of %s with --gear-batches: %s\n", task, gearRows(batched[task]))
		}
	}
}

// gearRows is a gear table, in words.
func gearRows(table []plan.Gear) string {
	var rows []string
	for _, g := range table {
		row := fmt.Sprintf("threshold %g up to %.1f items/s a replica", g.Threshold, g.MaxLoad)
		for _, v := range slices.Sorted(maps.Keys(g.Batches)) {
			row += fmt.Sprintf(", %s at batch %d", v, g.Batches[v].MaxBatch)
		}
		rows = append(rows, row)
	}
	return strings.Join(rows, "; ")
}

// planChecked solves in and prints its plan with the plan check's prediction (on the gaps in checkGaps, else on
// Poisson arrivals).
func planChecked(in allocate.Input, opt allocate.Options, checkGaps string, asJSON bool) error {
	opt.MaxServable = true
	r, err := allocate.SolveCascade(in, opt, nil)
	if err != nil {
		return err
	}
	pred, err := checkPlan(in.Spec, r, in.Demand, r.Servers, checkGaps)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(struct {
			planJSON
			Check control.Prediction `json:"check"`
		}{planJSON{in.Spec.Name, r}, pred})
	}
	printPlan(r, opt.Gap)
	printCheck(pred, in.Demand, checkGaps)
	return nil
}

// planSweep solves in at every demand from FROM to TO by STEP and prints each plan: a table's line, or JSON.
func planSweep(in allocate.Input, opt allocate.Options, from, to, step float64, asJSON bool) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	if !asJSON {
		head := "demand_qps\tmode\tservers\taccuracy\toptimal\tsolve_ms\tvariants"
		if in.Cluster.Priced() {
			head = "demand_qps\tmode\tservers\tby_class\tcost_per_hour\taccuracy\toptimal\tsolve_ms\tvariants"
		}
		if in.MinAccuracy > 0 { // what the plan serves at the floor
			head = strings.Replace(head, "mode", "mode\tserved_qps", 1)
		}
		fmt.Fprintln(tw, head)
	}
	for d := from; d <= to+1e-9; d += step {
		in.Demand = d
		r, err := allocate.SolveCascade(in, opt, nil)
		if err != nil {
			return err
		}
		if asJSON {
			if err := json.NewEncoder(os.Stdout).Encode(planJSON{in.Spec.Name, r}); err != nil {
				return err
			}
			continue
		}
		var hosted []string
		for _, v := range r.Variants {
			hosted = append(hosted, fmt.Sprintf("%s/%s x%d@%d", v.Task, v.Variant, v.Replicas, v.BatchSize))
		}
		for _, t := range slices.Sorted(maps.Keys(r.Cascades)) {
			hosted = append(hosted, fmt.Sprintf("cascade %s@%g", t, r.Cascades[t]))
		}
		servers := strconv.Itoa(r.ServersUsed)
		if in.Cluster.Priced() {
			servers += fmt.Sprintf("\t%s\t%.2f", byClass(r.Cluster, r.UsedByClass), r.CostPerHour)
		}
		mode := r.Mode
		if in.MinAccuracy > 0 {
			mode += fmt.Sprintf("\t%.1f", r.ServedQPS)
		}
		fmt.Fprintf(tw, "%g\t%s\t%s\t%.4f\t%v\t%.1f\t%s\n", d, mode, servers, r.SystemAccuracy, r.Optimal,
			r.SolveMs, strings.Join(hosted, " "))
	}
	return tw.Flush()
}

// writeLP writes the accuracy-scaling MILP of in to the file path (nothing when the model cannot be written).
func writeLP(path string, in allocate.Input) error {
	var buf bytes.Buffer
	if err := allocate.WriteLP(&buf, in); err != nil {
		return fmt.Errorf("--write-lp %s: %w", path, err)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func parseSweep(s string) (from, to, step float64, err error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return 0, 0, 0, fmt.Errorf("--sweep %q: want FROM:TO:STEP", s)
	}
	var v [3]float64
	for i, p := range parts {
		if v[i], err = strconv.ParseFloat(p, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("--sweep %q: %w", s, err)
		}
	}
	if v[2] <= 0 || v[0] < 0 || v[1] < v[0] {
		return 0, 0, 0, fmt.Errorf("--sweep %q: want 0 <= FROM <= TO and STEP > 0", s)
	}
	return v[0], v[1], v[2], nil
}

// printPlan prints r as a table; gap is the optimality tolerance it was solved with (0: the default).
func printPlan(r *allocate.Result, gap float64) {
	fmt.Printf("mode %s: %d of %d servers, system accuracy %.4f, serves %.1f QPS (at most %.1f with these servers)\n",
		r.Mode, r.ServersUsed, r.Servers, r.SystemAccuracy, r.ServedQPS, r.MaxServableQPS)
	printFloor(r)
	printCost(r)
	printSolve(r.Optimal, gap, r.Gap, r.SolveMs, r.Nodes)
	for _, t := range slices.Sorted(maps.Keys(r.Cascades)) {
		fmt.Printf("task %s served by its cascade at threshold %g\n", t, r.Cascades[t])
	}
	printVariants(r)
}

// printSolve prints how a solve went: proven optimal (within gap, its tolerance), or stopped at its limit at
// reached.
func printSolve(optimal bool, gap, reached, ms float64, nodes int) {
	switch {
	case optimal && gap > 0:
		fmt.Printf("optimal within a gap of %.2g, solved in %.1f ms (%d nodes)\n", gap, ms, nodes)
	case optimal:
		fmt.Printf("optimal, solved in %.1f ms (%d nodes)\n", ms, nodes)
	default:
		fmt.Printf("NOT proven optimal: stopped at the time limit with a gap of %.2g, after %.1f ms (%d nodes)\n",
			reached, ms, nodes)
	}
}

// printVariants prints r's hosted variants as a table.
func printVariants(r *allocate.Result) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "task\tvariant\treplicas\tbatch\tlatency_ms\tcapacity_qps\tload_qps")
	for _, v := range r.Variants {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f\t%.1f\t%.1f\n", v.Task, v.Variant, v.Replicas, v.BatchSize, v.LatencyMs,
			v.CapacityQPS, v.LoadQPS)
	}
	tw.Flush()
}

// parseCluster is the cluster of plan's --servers and --price: nil for a bare N with no prices (a cluster of one kind,
// Input.Servers), else the servers per class with their prices. Every priced class must have servers.
func parseCluster(servers, prices string) (plan.Cluster, error) {
	n, err := plan.ParseServers(servers)
	if err != nil {
		return nil, fmt.Errorf("--servers: %w", err)
	}
	p, err := plan.ParsePrices(prices)
	if err != nil {
		return nil, fmt.Errorf("--price: %w", err)
	}
	for class := range p {
		if _, ok := n[class]; !ok {
			return nil, fmt.Errorf("--price %s=...: --servers %s has no class %s", class, servers, class)
		}
	}
	if len(p) == 0 && len(n) == 1 && n[wire.DefaultClass] > 0 {
		return nil, nil
	}
	return plan.NewCluster(n, p), nil
}

// byClass spells the servers used per class of cluster c: "cpu=12,fast=2".
func byClass(c plan.Cluster, used map[string]int) string {
	parts := make([]string, len(c))
	for i, sc := range c {
		parts[i] = fmt.Sprintf("%s=%d", sc.Name, used[sc.Name])
	}
	return strings.Join(parts, ",")
}

// printCost prints, on a cluster of classes or priced, the servers r uses of each class and their cost.
func printCost(r *allocate.Result) {
	if r.Cluster == nil {
		return
	}
	fmt.Printf("servers by class %s of %s, cost %.2f per hour\n", byClass(r.Cluster, r.UsedByClass), r.Cluster,
		r.CostPerHour)
}

// printFloor prints, with an accuracy floor, whether the plan holds it at the demand: the fewest servers at it, or
// the demand the servers cannot serve at it (refused by the frontends).
func printFloor(r *allocate.Result) {
	switch {
	case r.MinAccuracy <= 0:
	case r.Mode != allocate.ModeOverloaded:
		fmt.Printf("min accuracy %g: held, on the fewest servers (least cost) that serve %.1f QPS at it\n",
			r.MinAccuracy, r.Demand)
	case r.ServedQPS <= 0:
		fmt.Printf("min accuracy %g: NOT reachable on this cluster at any demand; the frontends refuse every "+
			"request\n", r.MinAccuracy)
	default:
		fmt.Printf("min accuracy %g: NOT reachable at %.1f QPS on this cluster: it serves %.1f QPS at it; the "+
			"frontends refuse the other %.1f%%\n", r.MinAccuracy, r.Demand, r.ServedQPS,
			100*(1-r.ServedQPS/r.Demand))
	}
}
