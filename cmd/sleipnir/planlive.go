package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/latency"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// showLivePlan prints the plan in force of pipeline name in the running system at c's NATS server, as an observer:
// per variant hosted or measured, its latency per batch size as profiled, as the live workers measure it now
// (merged over their heartbeats), and as the plan was made with (the blend of the two).
func showLivePlan(c *common, name string, w io.Writer) error {
	nc, err := c.connect("plan", auth.User{Role: auth.Observer})
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, wire.Bucket)
	if err != nil {
		return fmt.Errorf("the KV bucket %s: %w", wire.Bucket, err)
	}
	e, err := kv.Get(ctx, wire.SpecKey(name))
	if err != nil {
		return fmt.Errorf("the spec of %q: %w", name, err)
	}
	spec, err := pipeline.ParseJSON(e.Value())
	if err != nil {
		return err
	}
	if e, err = kv.Get(ctx, wire.PlanKey(name)); err != nil {
		return fmt.Errorf("the plan of %q: %w", name, err)
	}
	var pl plan.Plan
	if err := json.Unmarshal(e.Value(), &pl); err != nil {
		return err
	}
	board := latency.NewBoard()
	keys, err := kv.ListKeysFiltered(ctx, wire.WorkerKeys.Pattern())
	if err != nil {
		return err
	}
	now := time.Now()
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var reg wire.Registration
		if json.Unmarshal(e.Value(), &reg) == nil {
			board.Set(reg.ID, e.Created(), reg.Observed)
		}
	}
	measured := board.Measured(spec, now, 10*time.Second)
	printLivePlan(w, spec, &pl, measured)
	return nil
}

// printLivePlan prints pl's variants (and the others measured) with their profiled, measured and planned latencies.
func printLivePlan(w io.Writer, spec *pipeline.Spec, pl *plan.Plan, measured map[string][]wire.BatchLatency) {
	fmt.Fprintf(w, "plan %d of %s, mode %s", pl.Epoch, pl.Pipeline, pl.Mode)
	if a := pl.Allocation; a != nil {
		fmt.Fprintf(w, ": %d of %d servers, for %.1f QPS, accuracy %.4f", a.ActiveServers, a.ClusterServers,
			a.DemandQPS, a.SystemAccuracy)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "variant\treplicas@batch\tbatch\tprofiled p50/p95 ms\tmeasured batches p50/p95 ms\tplanned p50/p95 ms")
	for _, t := range spec.Tasks {
		for vi := range t.Variants {
			v := &t.Variants[vi]
			key := wire.VariantKey{Task: t.Name, Variant: v.Name}.String()
			vp := pl.Find(t.Name, v.Name)
			if vp == nil && len(measured[key]) == 0 && len(pl.Profiles[key]) == 0 {
				continue
			}
			hosted := "-"
			if vp != nil {
				hosted = fmt.Sprintf("%d@%d", vp.Replicas, vp.MaxBatch)
			}
			label := key
			for i, p := range v.Profile {
				m := "-"
				for _, b := range measured[key] {
					if b.Batch == p.Batch {
						m = fmt.Sprintf("%d  %.1f/%.1f", b.Count, b.P50Ms, b.P95Ms)
					}
				}
				planned := p
				if pp := pl.Profiles[key]; i < len(pp) {
					planned = pp[i]
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f/%.1f\t%s\t%.1f/%.1f\n", label, hosted, p.Batch, p.P50Ms, p.P95Ms, m,
					planned.P50Ms, planned.P95Ms)
				label, hosted = "", "" // the variant's other batch sizes below it
			}
		}
	}
	tw.Flush()
}
