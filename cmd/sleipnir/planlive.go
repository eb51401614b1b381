package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
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
	var workers []wire.Registration
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var reg wire.Registration
		if json.Unmarshal(e.Value(), &reg) == nil {
			board.Set(reg.ID, e.Created(), reg.Observed)
			workers = append(workers, reg)
		}
	}
	measured := board.Measured(spec, now, 10*time.Second)
	printLivePlan(w, spec, &pl, measured)
	printLiveWorkers(w, name, workers)
	return nil
}

// printLiveWorkers prints, per server class, the workers that serve pipeline name's variants, each with the
// variant it serves, and the workers of the class that serve none of them; a worker serving a variant of another
// class than its own (which the planner never assigns) is marked "!".
func printLiveWorkers(w io.Writer, name string, regs []wire.Registration) {
	type row struct{ id, serves string }
	byClass := map[string][]row{}
	for _, r := range regs {
		class := cmp.Or(r.Class, wire.DefaultClass)
		serves := "-"
		if k, err := wire.ParseServedKey(r.Variant); err == nil {
			if k.Pipeline != name {
				continue // another pipeline's
			}
			serves = k.Key().String()
			if wire.ClassOf(k.Variant) != class {
				serves += " !"
			}
		}
		byClass[class] = append(byClass[class], row{r.ID, serves})
	}
	fmt.Fprintln(w, "workers by class (a replica of model@class runs on a worker of that class):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "class	workers	serving	worker: variant")
	for _, class := range slices.Sorted(maps.Keys(byClass)) {
		rows := byClass[class]
		slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.id, b.id) })
		var parts []string
		serving := 0
		for _, r := range rows {
			if r.serves != "-" {
				serving++
			}
			parts = append(parts, r.id+": "+r.serves)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", class, len(rows), serving, strings.Join(parts, ", "))
	}
	tw.Flush()
}

// printLivePlan prints pl's variants (and the others measured) with their profiled, measured and planned latencies.
func printLivePlan(w io.Writer, spec *pipeline.Spec, pl *plan.Plan, measured map[string][]wire.BatchLatency) {
	fmt.Fprintf(w, "plan %d of %s, mode %s", pl.Epoch, pl.Pipeline, pl.Mode)
	if a := pl.Allocation; a != nil {
		fmt.Fprintf(w, ": %d of %d servers, for %.1f QPS, accuracy %.4f", a.ActiveServers, a.ClusterServers,
			a.DemandQPS, a.SystemAccuracy)
		if len(a.Cluster) > 0 {
			used := pl.ServersByClass()
			var parts []string
			for _, sc := range a.Cluster {
				parts = append(parts, fmt.Sprintf("%s %d of %d", sc.Name, used[sc.Name], sc.Servers))
			}
			fmt.Fprintf(w, "; by class: %s", strings.Join(parts, ", "))
		}
		if a.CostPerHour > 0 || a.Cluster.Priced() {
			fmt.Fprintf(w, "; cost %.2f per hour", a.CostPerHour)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "variant\tclass\treplicas@batch\tbatch\tprofiled p50/p95 ms\tmeasured batches p50/p95 ms\tplanned p50/p95 ms")
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
			label, class := key, v.Class()
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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f/%.1f\t%s\t%.1f/%.1f\n", label, class, hosted, p.Batch, p.P50Ms,
					p.P95Ms, m, planned.P50Ms, planned.P95Ms)
				label, class, hosted = "", "", "" // the variant's other batch sizes below it
			}
		}
	}
	tw.Flush()
}
