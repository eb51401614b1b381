package main

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// PlanCost is what the plans in force during a run cost per hour (plan.Allocation.CostPerHour, at the planner's
// --price per server class), read from the KV bucket once a second: the mean and largest over the run, and the
// last one's. All 0 when no class is priced or the plan could not be read.
type PlanCost struct {
	Mean    float64 `json:"plan_cost_per_hour_mean,omitempty"`
	Max     float64 `json:"plan_cost_per_hour_max,omitempty"`
	Last    float64 `json:"plan_cost_per_hour,omitempty"`
	Samples int     `json:"plan_cost_samples,omitempty"`
}

// watchCost samples the cost per hour of pipeline's plan in force every second until the returned function is
// called, which returns what it saw. A user whose permissions do not reach the bucket (a deployment's `client`
// user) samples nothing: the server would log each refused read.
func watchCost(ctx context.Context, js jetstream.JetStream, pipeline string) func() PlanCost {
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu   sync.Mutex
		cost PlanCost
		sum  float64
		done = make(chan struct{})
	)
	kv, err := js.KeyValue(ctx, wire.Bucket)
	sample := func() {
		pl, err := planIn(ctx, kv, pipeline)
		if err != nil || pl.Allocation == nil {
			return
		}
		c := pl.Allocation.CostPerHour
		mu.Lock()
		defer mu.Unlock()
		sum += c
		cost.Samples++
		cost.Max, cost.Last = max(cost.Max, c), c
		cost.Mean = sum / float64(cost.Samples)
	}
	go func() {
		defer close(done)
		if err != nil {
			return
		}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			sample()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() PlanCost {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return cost
	}
}
