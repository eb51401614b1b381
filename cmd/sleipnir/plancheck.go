package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/sim"
)

// checkPlan is the plan check's prediction (pkg/sim.Checker) for the plan r at qps on servers, on the gaps of the
// file gapsFile ("": Poisson arrivals).
func checkPlan(spec *pipeline.Spec, r *allocate.Result, qps float64, servers int, gapsFile string) (
	control.Prediction, error) {
	if len(r.Variants) == 0 {
		return control.Prediction{}, fmt.Errorf("--check: %v", control.ErrCannotServe)
	}
	o := control.Observed{Demand: qps, Servers: servers}
	if gapsFile != "" {
		gaps, err := readGaps(gapsFile)
		if err != nil {
			return control.Prediction{}, err
		}
		o.Traffic = &demand.TrafficSample{Gaps: [][]time.Duration{gaps}}
	}
	var cfg control.Config
	cfg.SetDefaults()
	p := r.Plan(spec.Name, 0)
	p.Routing = routing.MostAccurateFirst(routing.Input{Spec: spec, Plan: p, Demand: qps,
		Utilization: cfg.RouteUtilization})
	policy := deadline.Policy(spec.DeadlinePolicy)
	if policy == "" {
		policy = deadline.Default
	}
	return sim.Checker{Policy: policy, CommLatency: -1, Seed: 1}.Check(spec, p, o)
}

// readGaps reads a file of times between arrivals in milliseconds.
func readGaps(path string) ([]time.Duration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--check-gaps: %w", err)
	}
	var out []time.Duration
	for _, f := range strings.Fields(string(data)) {
		ms, err := strconv.ParseFloat(f, 64)
		if err != nil || !(ms >= 0) || ms > 3.6e6 {
			return nil, fmt.Errorf("--check-gaps %s: %q: want a time in ms, 0 to an hour", path, f)
		}
		out = append(out, time.Duration(ms*float64(time.Millisecond)))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--check-gaps %s: no gaps", path)
	}
	return out, nil
}

// printCheck prints the check's prediction.
func printCheck(pred control.Prediction, qps float64, gapsFile string) {
	on := fmt.Sprintf("Poisson arrivals at %g QPS (no traffic given)", qps)
	if gapsFile != "" {
		on = fmt.Sprintf("the gaps of %s replayed at %g QPS", gapsFile, qps)
	}
	fmt.Printf("check: %.2f%% of the deadlines missed (standard error %.2f), %d requests simulated on %s\n",
		100*pred.ViolationRatio, 100*pred.StdErr, pred.Requests, on)
	var queues []string
	for _, key := range slices.Sorted(maps.Keys(pred.Queues)) {
		queues = append(queues, fmt.Sprintf("%s %.1f", key, pred.Queues[key]))
	}
	fmt.Printf("longest queues (batches per replica): %s\n", strings.Join(queues, ", "))
}
