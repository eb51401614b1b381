package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/sim"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// runSim simulates one or several pipelines under their workloads, once per system, and reports; with --capacity it
// searches each system's effective capacity instead.
func runSim(args []string) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	var files pipelineFiles
	fs.Var(&files, "pipeline", "pipeline spec YAML `FILE` (required), repeatable: the pipelines share the servers")
	var wls pipelineFiles
	fs.Var(&wls, "workload", "the demand: "+workload.Syntax+"; NAME=WORKLOAD for pipeline NAME alone, once per "+
		"pipeline (a bare one is every pipeline's without its own; default constant:300:60s)")
	cv := fs.Float64("cv", 1, "coefficient of variation of inter-arrival times: 1 is Poisson, otherwise Gamma")
	servers := fs.String("servers", "20", "the cluster: N servers, or CLASS=N,... per server class (docs/classes.md)")
	prices := fs.String("price", "", "hourly price of a server per class, CLASS=PER_HOUR,... (the summaries report "+
		"the cost of the servers in use)")
	seed := fs.Uint64("seed", 1, "seed of arrivals, latencies, fan-out and routing")
	out := fs.String("out", "", "directory for the report: SYSTEM.csv time series, figure.svg, figure.png, summary.json")
	interval := fs.Int("interval", 0, "report interval in seconds (0: about 300 points over the run)")
	warmup := fs.Duration("warmup", 0, "leave the first part of the run out of the summary (the time series keep it)")
	comm := fs.Duration("comm", -1, "latency of one hop (negative: the pipeline's comm_latency_ms)")
	ctl := control.RegisterFlags(fs)
	capacity := fs.Bool("capacity", false, "find each system's effective capacity: the largest constant demand "+
		"served with under 1% SLO violations (ignores --workload)")
	capWarmup := fs.Duration("capacity-warmup", 20*time.Second, "with --capacity: warmup of each probe")
	capMeasure := fs.Duration("capacity-measure", 60*time.Second, "with --capacity: measured part of each probe")
	slowdown := fs.String("slowdown", "", "emulate slower machines: "+sim.SlowdownSyntax)
	admit := fs.Bool("admission", false, "the frontends' admission control (pkg/admission), on by default on up and "+
		"frontend; off here by default, so that the figures simulated without it stay reproducible")
	asJSON := fs.Bool("json", false, "print the summaries as JSON")
	routingMode := fs.String("routing", "", "every pipeline's routing_mode: tables, queue or ramsis (default: each spec's)")
	noCascade := fs.Bool("no-cascade", false, "serve every task as if it declared no cascade (the same pipeline without its cascades)")
	slo := fs.Duration("slo", 0, "every pipeline's end-to-end SLO (default: each spec's slo_ms)")
	minAccuracy := fs.Float64("min-accuracy", 0, "every pipeline's floor on the system accuracy, a `SHARE` in (0, 1] "+
		"(default: each spec's min_accuracy): plans on the fewest servers that hold it; what they cannot serve at "+
		"it is refused with --admission")
	progress := fs.Bool("progress", isTerminal(os.Stderr), "show a progress bar on standard error (default: when it is a terminal)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to `FILE` (go tool pprof: the "+
		"planning core's share is under core.(*Cluster).Tick)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if len(files) == 0 {
		return errors.New("--pipeline is required")
	}
	specs, err := loadPipelinesCascades(files, !*noCascade)
	if err != nil {
		return err
	}
	if err := setRoutingMode(specs, *routingMode); err != nil {
		return err
	}
	if err := overrideSpecs(specs, *slo, *minAccuracy); err != nil {
		return err
	}
	for _, s := range specs { // routing_mode ramsis plans for the arrivals simulated, unless the spec says
		if s.ArrivalCV == 0 {
			s.ArrivalCV = *cv
		}
	}
	cc, err := ctl.Config()
	if err != nil {
		return err
	}
	syss, err := systemNames(ctl.Systems(), specs, cc)
	if err != nil {
		return err
	}
	slow, err := sim.ParseSlowdowns(*slowdown)
	if err != nil {
		return fmt.Errorf("--slowdown: %w", err)
	}
	cluster, err := parseCluster(*servers, *prices)
	if err != nil {
		return err
	}
	total := cluster.Total()
	if cluster == nil { // a bare N
		total, _ = strconv.Atoi(strings.TrimSpace(*servers))
	}
	base := sim.Config{Servers: total, Cluster: cluster, Seed: *seed, CommLatency: *comm, Warmup: *warmup,
		Control: cc, Slowdown: slow, Admit: *admit}
	if *capacity {
		if len(specs) > 1 {
			return errors.New("--capacity: one pipeline at a time")
		}
		base.Spec = specs[0]
		return runCapacity(base, syss, sim.CapacitySearch{Warmup: *capWarmup, Measure: *capMeasure}, *out, *asJSON)
	}
	if base.Pipelines, err = simWorkloads(specs, wls, *cv); err != nil {
		return fmt.Errorf("--workload: %w", err)
	}
	bar := newProgressBar(*progress, len(syss))
	results := make([][]*sim.Result, len(syss)) // per system, per pipeline
	err = eachSystem(base, syss, func(i int, c sim.Config) (err error) {
		c.Progress = func(done, total time.Duration) { bar.update(i, done, total) }
		results[i], err = sim.RunAll(c)
		return err
	})
	bar.done()
	if err != nil {
		return err
	}
	return simReport(base, results, *seed, *interval, *out, *asJSON)
}

// setRoutingMode gives every spec routing mode mode ("" leaves each its own).
func setRoutingMode(specs []*pipeline.Spec, mode string) error {
	switch mode {
	case "":
		return nil
	case routing.ModeTables, routing.ModeQueue, routing.ModeRAMSIS:
	default:
		return fmt.Errorf("--routing %q: want %s, %s or %s", mode, routing.ModeTables, routing.ModeQueue,
			routing.ModeRAMSIS)
	}
	for _, s := range specs {
		s.RoutingMode = mode
	}
	return nil
}

// systemNames are the systems to run, as --policy names them, checked against every pipeline and once each: two
// names that resolve to the same full name (with the deadline policy) on every pipeline are one system ("loki" and
// "loki:reroute" on the traffic example). Each pipeline resolves a name itself (pkg/sim), so a bare "loki" runs every
// pipeline under its own deadline_policy.
func systemNames(systems []string, specs []*pipeline.Spec, cc control.Config) ([]string, error) {
	var syss []string
	seen := map[string]bool{}
	for _, name := range systems {
		var full []string
		for _, spec := range specs {
			s, err := control.ParseSystem(name, spec, cc)
			if err != nil {
				return nil, fmt.Errorf("--policy: %w", err)
			}
			full = append(full, s.Name)
		}
		if key := strings.Join(full, ","); !seen[key] {
			seen[key] = true
			syss = append(syss, name)
		}
	}
	return syss, nil
}

// simReport prints the summaries (one JSON object per system and pipeline), and writes the report into out: one
// per pipeline, in out/PIPELINE when there are several.
func simReport(base sim.Config, results [][]*sim.Result, seed uint64, interval int, out string, asJSON bool) error {
	servers := serversText(base)
	for pi, sv := range base.Pipelines {
		perSystem := make([]*sim.Result, len(results))
		for i := range results {
			perSystem[i] = results[i][pi]
		}
		if asJSON {
			enc := json.NewEncoder(os.Stdout)
			for _, r := range perSystem {
				if err := enc.Encode(r.Summary); err != nil {
					return err
				}
			}
		} else {
			fmt.Printf("%s, %s, %s, seed %d\n", sv.Spec.Name, sv.Workload.Name, servers, seed)
			sim.PrintSummaries(os.Stdout, perSystem)
		}
		if out == "" {
			continue
		}
		dir := out
		if len(base.Pipelines) > 1 {
			dir = filepath.Join(out, sv.Spec.Name)
		}
		width := interval
		if width <= 0 {
			width = sim.IntervalFor(sv.Workload.Duration())
		}
		title := fmt.Sprintf("%s: %s on %s", sv.Spec.Name, sv.Workload.Name, servers)
		if len(base.Pipelines) > 1 {
			title += fmt.Sprintf(" shared by %d pipelines", len(base.Pipelines))
		}
		if err := sim.WriteReport(dir, title, perSystem, width); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "report written to %s\n", dir)
	}
	return nil
}

// serversText names a simulation's cluster for people: "20 servers", or "servers cpu=16,fast=4 (prices
// cpu=0.4,fast=2.5 per hour)".
func serversText(c sim.Config) string {
	if c.Cluster == nil {
		return fmt.Sprintf("%d servers", c.Servers)
	}
	text := "servers " + c.Cluster.String()
	if c.Cluster.Priced() {
		var ps []string
		for _, sc := range c.Cluster {
			ps = append(ps, fmt.Sprintf("%s=%g", sc.Name, sc.PricePerHour))
		}
		text += " (prices " + strings.Join(ps, ",") + " per hour)"
	}
	return text
}

// simWorkloads pairs each pipeline with its workload: values are WORKLOAD (every pipeline's without its own) or
// NAME=WORKLOAD (pipeline NAME's), each pipeline given one at most; none at all is constant:300:60s.
func simWorkloads(specs []*pipeline.Spec, values []string, cv float64) ([]sim.Served, error) {
	byName, shared := map[string]string{}, ""
	for _, v := range values {
		name, w, named := strings.Cut(v, "=")
		if !named || strings.Contains(name, ":") { // a workload's own "=" (":cv=4"); a pipeline's name has no ":"
			if shared != "" {
				return nil, fmt.Errorf("%q and %q: one workload without a pipeline name at most", shared, v)
			}
			shared = v
			continue
		}
		if !slices.ContainsFunc(specs, func(s *pipeline.Spec) bool { return s.Name == name }) {
			return nil, fmt.Errorf("%q: no pipeline %q among --pipeline", v, name)
		}
		if _, dup := byName[name]; dup {
			return nil, fmt.Errorf("pipeline %q given two workloads", name)
		}
		byName[name] = w
	}
	if len(values) == 0 {
		shared = "constant:300:60s"
	}
	out := make([]sim.Served, len(specs))
	for i, spec := range specs {
		text, ok := byName[spec.Name]
		if !ok {
			text = shared
		}
		if text == "" {
			return nil, fmt.Errorf("no workload for pipeline %q: give %s=WORKLOAD", spec.Name, spec.Name)
		}
		w, err := workload.Parse(text, cv)
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", spec.Name, err)
		}
		out[i] = sim.Served{Spec: spec, Workload: w}
	}
	return out, nil
}

// eachSystem runs f for every system at once (the simulations are independent and single-threaded), each with
// base configured for its system.
func eachSystem(base sim.Config, syss []string, f func(i int, c sim.Config) error) error {
	errs := make([]error, len(syss))
	var wg sync.WaitGroup
	for i, s := range syss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := base
			c.System = s
			errs[i] = f(i, c)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// capacityReport is summary.json of a capacity search.
type capacityReport struct {
	System      string      `json:"system"`
	CapacityQPS float64     `json:"capacity_qps"`
	Probes      []sim.Probe `json:"probes"`
}

func runCapacity(base sim.Config, syss []string, cs sim.CapacitySearch, out string, asJSON bool) error {
	reps := make([]capacityReport, len(syss))
	err := eachSystem(base, syss, func(i int, c sim.Config) error {
		sys, err := control.ParseSystem(c.System, c.Spec, c.Control)
		if err != nil {
			return err
		}
		q, probes, err := sim.Capacity(c, cs)
		reps[i] = capacityReport{System: sys.Name, CapacityQPS: q, Probes: probes}
		return err
	})
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range reps {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	} else {
		fmt.Printf("effective capacity (largest constant demand with under %.0f%% SLO violations, measured over %v "+
			"after %v), %s:\n", 100*0.01, cs.Measure, cs.Warmup, serversText(base))
		for _, r := range reps {
			ratio := ""
			if reps[0].CapacityQPS > 0 && len(reps) > 1 {
				ratio = fmt.Sprintf("  (%.2fx %s)", r.CapacityQPS/reps[0].CapacityQPS, reps[0].System)
			}
			fmt.Printf("  %-20s %7.1f QPS%s\n", r.System, r.CapacityQPS, ratio)
		}
	}
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(reps, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "capacity.json"), append(data, '\n'), 0o644)
}

// progressBar draws the slowest simulation's progress on standard error.
type progressBar struct {
	on     bool
	mu     sync.Mutex
	doneAt []time.Duration
	total  time.Duration
	last   time.Time
}

func newProgressBar(on bool, n int) *progressBar {
	return &progressBar{on: on, doneAt: make([]time.Duration, n)}
}

func (p *progressBar) update(i int, done, total time.Duration) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.doneAt[i], p.total = done, total
	if time.Since(p.last) < 200*time.Millisecond && done < total {
		return
	}
	p.last = time.Now()
	slowest := p.total
	for _, d := range p.doneAt {
		slowest = min(slowest, d)
	}
	drawBar(float64(slowest)/float64(max(p.total, 1)), fmt.Sprintf("%v of %v simulated", slowest.Truncate(time.Second), p.total))
}

// drawBar draws a progress bar at frac (0 to 1) with a label on standard error, over the previous one.
func drawBar(frac float64, label string) {
	const width = 40
	n := int(frac * width)
	fmt.Fprintf(os.Stderr, "\r\033[K[%s%s] %3.0f%%  %s", strings.Repeat("#", n), strings.Repeat(".", width-n), 100*frac, label)
}

func (p *progressBar) done() {
	if p.on && p.total > 0 {
		fmt.Fprintln(os.Stderr)
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// startCPUProfile profiles the process's CPU into file until the returned stop.
func startCPUProfile(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
