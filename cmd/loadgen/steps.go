package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// StepResult is one step's summary with the plan in force at its end.
type StepResult struct {
	Summary
	PlanEpoch      uint64  `json:"plan_epoch"`
	PlanMode       string  `json:"plan_mode"`
	ActiveServers  int     `json:"active_servers"`
	PlanAccuracy   float64 `json:"plan_accuracy"`
	PlannedForQPS  float64 `json:"planned_for_qps"`
	ClusterServers int     `json:"cluster_servers"`
}

// runSteps runs each step in turn (warmup, then measurement) and prints a table row per step, or with asJSON one
// JSON object per step.
func runSteps(ctx context.Context, nc *nats.Conn, cfg Config, steps []workload.Step, asJSON bool) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if !asJSON {
		fmt.Printf("%-8s %-7s %-6s %-5s %-9s %-8s %-10s %-7s %-9s %-11s %s\n", "qps", "sent", "ok", "lost",
			"slo_viol", "accuracy", "plan_mode", "active", "plan_acc", "planned_qps", "cost_per_h")
	}
	for _, st := range steps {
		c := cfg
		c.QPS, c.Duration = st.QPS, st.Duration
		stopCost := watchCost(ctx, js, cfg.Pipeline)
		sum, err := Run(ctx, nc, c, os.Stderr)
		sum.PlanCost = stopCost()
		if err != nil {
			return err
		}
		res := StepResult{Summary: sum}
		if pl, err := currentPlan(ctx, js, cfg.Pipeline); err != nil {
			fmt.Fprintf(os.Stderr, "loadgen: reading the plan: %v\n", err)
		} else {
			res.PlanEpoch, res.PlanMode, res.ActiveServers = pl.Epoch, pl.Mode, pl.Servers()
			if a := pl.Allocation; a != nil {
				res.PlanAccuracy, res.PlannedForQPS, res.ClusterServers = a.SystemAccuracy, a.DemandQPS, a.ClusterServers
			}
		}
		if asJSON {
			line, _ := json.Marshal(res)
			fmt.Println(string(line))
			continue
		}
		fmt.Printf("%-8.0f %-7d %-6d %-5d %-9.4f %-8.4f %-10s %-7d %-9.4f %-11.1f %.2f\n", st.QPS, sum.Sent, sum.OK,
			sum.Lost, sum.SLOViolationRatio, sum.MeanAccuracy, res.PlanMode, res.ActiveServers, res.PlanAccuracy,
			res.PlannedForQPS, sum.PlanCost.Mean)
	}
	return nil
}

func currentPlan(ctx context.Context, js jetstream.JetStream, pipeline string) (*plan.Plan, error) {
	kv, err := js.KeyValue(ctx, wire.Bucket)
	if err != nil {
		return nil, err
	}
	return planIn(ctx, kv, pipeline)
}

// planIn is pipeline's plan in force, from the bucket kv.
func planIn(ctx context.Context, kv jetstream.KeyValue, pipeline string) (*plan.Plan, error) {
	e, err := kv.Get(ctx, wire.PlanKey(pipeline))
	if err != nil {
		return nil, err
	}
	var pl plan.Plan
	if err := json.Unmarshal(e.Value(), &pl); err != nil {
		return nil, err
	}
	return &pl, nil
}
