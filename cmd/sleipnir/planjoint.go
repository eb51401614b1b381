package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// planJSON is one pipeline's plan as `plan --json` prints it: the allocation, with the pipeline's name.
type planJSON struct {
	Pipeline string `json:"pipeline"`
	*allocate.Result
}

// demandFlag is plan's repeatable --demand: QPS, or NAME=QPS per pipeline.
type demandFlag struct {
	plain  *float64
	byName map[string]float64
	order  []string
}

func (d *demandFlag) String() string {
	if d == nil || d.plain == nil && len(d.byName) == 0 {
		return "0"
	}
	if d.plain != nil {
		return strconv.FormatFloat(*d.plain, 'g', -1, 64)
	}
	var parts []string
	for _, n := range d.order {
		parts = append(parts, n+"="+strconv.FormatFloat(d.byName[n], 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

func (d *demandFlag) Set(v string) error {
	name, num, named := strings.Cut(v, "=")
	if !named {
		num = v
	}
	q, err := strconv.ParseFloat(num, 64)
	if err != nil || q < 0 || q > 1e9 {
		return fmt.Errorf("%q: want QPS or NAME=QPS, a number from 0 to 1e9", v)
	}
	switch {
	case !named && (d.plain != nil || len(d.byName) > 0), named && d.plain != nil:
		return fmt.Errorf("%q: give one QPS, or NAME=QPS once per pipeline", v)
	case !named:
		d.plain = &q
	default:
		if _, dup := d.byName[name]; dup || name == "" {
			return fmt.Errorf("%q: pipeline %q given twice or unnamed", v, name)
		}
		if d.byName == nil {
			d.byName = map[string]float64{}
		}
		d.byName[name] = q
		d.order = append(d.order, name)
	}
	return nil
}

// of is the demand of each of specs: a plain QPS goes with one pipeline; NAME=QPS names each pipeline (none: 0).
func (d *demandFlag) of(specs []*pipeline.Spec) ([]float64, error) {
	out := make([]float64, len(specs))
	if d.plain != nil {
		if len(specs) > 1 {
			return nil, fmt.Errorf("--demand %v: with several pipelines, give NAME=QPS for each", *d.plain)
		}
		out[0] = *d.plain
		return out, nil
	}
	known := map[string]bool{}
	for i, s := range specs {
		known[s.Name] = true
		q, ok := d.byName[s.Name]
		if !ok && len(specs) > 1 {
			return nil, fmt.Errorf("no --demand %s=QPS", s.Name)
		}
		out[i] = q
	}
	for _, n := range d.order {
		if !known[n] {
			return nil, fmt.Errorf("--demand %s=...: no --pipeline defines %q", n, n)
		}
	}
	return out, nil
}

// planJoint solves and prints the joint plan of several pipelines on in.Servers, each at its demand qps (in gives
// the settings they share).
func planJoint(in allocate.Input, specs []*pipeline.Spec, qps []float64, opt allocate.Options, asJSON bool) error {
	joint := allocate.JointInput{Servers: in.Servers, Cluster: in.Cluster}
	for i, s := range specs {
		p := in
		p.Spec, p.Demand = s, qps[i]
		joint.Pipelines = append(joint.Pipelines, p)
	}
	res, err := allocate.SolveJoint(joint, opt)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		for i, r := range res.Pipelines {
			if err := enc.Encode(planJSON{specs[i].Name, r}); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Printf("joint plan of %d pipelines: %d of %d servers\n", len(specs), res.ServersUsed, res.Servers)
	if len(in.Cluster) > 0 {
		fmt.Printf("servers by class %s of %s, cost %.2f per hour\n", byClass(in.Cluster, res.UsedByClass),
			in.Cluster, res.CostPerHour)
	}
	printSolve(res.Optimal, opt.Gap, res.Gap, res.SolveMs, res.Nodes)
	for i, r := range res.Pipelines {
		fmt.Printf("\npipeline %s (class %d), %.1f QPS: mode %s, %d servers, system accuracy %.4f, serves %.1f QPS\n",
			specs[i].Name, specs[i].Priority, r.Demand, r.Mode, r.ServersUsed, r.SystemAccuracy, r.ServedQPS)
		printVariants(r)
	}
	return nil
}
