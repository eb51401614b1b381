package control

import (
	"fmt"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/latency"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// JointMILP allocates several pipelines on one cluster with one MILP (allocate.SolveJoint): the planning core
// calls it when any pipeline's loop would re-plan, with every pipeline's Observed, so that the workers one
// pipeline does not need go to another and, when they are short, the priority classes decide who gives up what.
// Its options are MILP's.
type JointMILP struct {
	MILP
	// HardwareOnly: see allocate.JointInput (the error is allocate.ErrNotHardware).
	HardwareOnly bool
	// MaxNodes bounds each joint solve's branch-and-bound nodes (0: pkg/milp's default), where the simulator, whose
	// runs must not depend on the machine's speed, can have no time limit.
	MaxNodes int
}

// JointPipeline is one pipeline of a joint allocation: its spec and what is observed of it (Observed.Servers is
// ignored: the cluster is shared; Profiles are applied as a Loop does, so clear them for ProfilesOnly).
type JointPipeline struct {
	Spec     *pipeline.Spec
	Observed Observed
}

// Allocate solves the joint allocation of pipes on servers workers. plans has one plan per pipeline, in pipes'
// order (epoch 0, no routing: each pipeline's Loop routes its own), nil for a pipeline shed entirely (its class
// had no servers left for it: its frontends should refuse its requests); res has the joint figures.
func (a JointMILP) Allocate(pipes []JointPipeline, servers int) (plans []*plan.Plan, res *allocate.JointResult,
	err error) {
	return a.AllocateOn(pipes, plan.Uniform(servers))
}

// AllocateOn is Allocate on a cluster of server classes, shared by the pipelines (one servers row per class).
func (a JointMILP) AllocateOn(pipes []JointPipeline, cluster plan.Cluster) (plans []*plan.Plan,
	res *allocate.JointResult, err error) {
	in := allocate.JointInput{Servers: cluster.Total(), HardwareOnly: a.HardwareOnly}
	if !cluster.Classless() || cluster.Priced() {
		in.Cluster = cluster
	}
	for _, p := range pipes {
		in.Pipelines = append(in.Pipelines, allocate.Input{Spec: latency.Apply(p.Spec, p.Observed.Profiles),
			Demand: p.Observed.Demand, Fanout: p.Observed.Fanout, Utilization: a.Utilization,
			LatencyModel: a.LatencyModel, ArrivalDispersion: p.Observed.Traffic.Dispersion()})
	}
	res, err = allocate.SolveJoint(in, allocate.Options{TimeLimit: a.TimeLimit, Workers: a.Workers,
		MaxNodes: a.MaxNodes})
	if err != nil {
		return nil, nil, err
	}
	plans = make([]*plan.Plan, len(pipes))
	hosted := false
	for i, r := range res.Pipelines {
		if len(r.Variants) > 0 {
			plans[i], hosted = r.Plan(pipes[i].Spec.Name, 0), true
		}
	}
	if !hosted {
		return nil, res, fmt.Errorf("%w: no pipeline has a plan", ErrCannotServe)
	}
	return plans, res, nil
}
