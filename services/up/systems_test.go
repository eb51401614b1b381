package up

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/sim"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
	"github.com/sleipnir-serving/sleipnir/services/planner"
)

// TestEverySystemLiveAndSimulated runs each system of control.Systems, by its name, live for a few seconds (up:
// embedded JetStream, the planner running the system, 10 emulated workers, 20 QPS) and in the simulator. Live, the
// published spec carries the system's deadline policy, and the plan is the system's own: Loki sizes the cluster for
// the demand (a few servers), InferLine hosts only the most accurate variants, Proteus plans each task from its
// measured demand on the whole cluster, CG-Mean and CG-Peak replicate one unit of the most accurate variants, static
// keeps the spec's allocation; every request gets exactly one reply.
func TestEverySystemLiveAndSimulated(t *testing.T) {
	const workers, qps = 10, 20
	for _, kind := range control.Systems {
		t.Run(kind.Name, func(t *testing.T) {
			sys, spec := startSystemWith(t, "../../examples/ocr-chain.yaml", Config{Workers: workers,
				Planner: planner.Config{System: kind.Name, Config: control.Config{SolveTimeLimit: 5 * time.Second}}})
			want, err := control.ParseSystem(kind.Name, spec, control.Config{})
			if err != nil {
				t.Fatal(err)
			}
			c := newClient(t, sys)
			ctx := context.Background()
			js, err := jetstream.New(c.Conn())
			if err != nil {
				t.Fatal(err)
			}
			kv, err := js.KeyValue(ctx, wire.Bucket)
			if err != nil {
				t.Fatal(err)
			}
			var published pipeline.Spec
			if e, err := kv.Get(ctx, wire.SpecKey(spec.Name)); err != nil || json.Unmarshal(e.Value(), &published) != nil {
				t.Fatalf("no spec in KV: %v", err)
			}
			if published.DeadlinePolicy != string(want.Policy) {
				t.Errorf("published deadline policy %q, want %s's %q", published.DeadlinePolicy, want.Name, want.Policy)
			}
			// The system's own plan: one planned for the demand (static: the first plan, which stands).
			own := func(p *plan.Plan) bool { return p.Allocation != nil || want.Allocator == nil }
			current := func() *plan.Plan {
				var p plan.Plan
				if e, err := kv.Get(ctx, wire.PlanKey(spec.Name)); err == nil && json.Unmarshal(e.Value(), &p) == nil {
					return &p
				}
				return nil
			}

			// The load runs until the system's plan is in force and a second more.
			hdr := nats.Header{wire.HeaderTimeout: []string{"2s"}}
			var subjects []string
			var pl *plan.Plan
			var until time.Time
			for end := time.Now().Add(20 * time.Second); until.IsZero() || time.Now().Before(until); {
				if time.Now().After(end) {
					t.Fatalf("no plan of %s after 20s of load (plan in force: %+v)", want.Name, current())
				}
				subjects = append(subjects, c.Send(t, spec.Name, inputRequest(t), hdr))
				if p := current(); until.IsZero() && p != nil && own(p) {
					pl, until = p, time.Now().Add(time.Second)
				}
				time.Sleep(time.Second / qps) // the load
			}
			replies := c.Wait(t, subjects, 10*time.Second)
			c.ExpectOneReply(t, subjects, 100*time.Millisecond)
			ok := 0
			for _, s := range subjects {
				if decodeReply(t, replies[s][0]).Status == wire.StatusOK {
					ok++
				}
			}
			if ok < len(subjects)/2 {
				t.Errorf("%d of %d requests ok", ok, len(subjects))
			}
			t.Logf("live %s: %d of %d requests ok; its plan: mode %s, %d servers", want.Name, ok, len(subjects),
				pl.Mode, pl.Servers())

			switch kind.Name {
			case "loki":
				if pl.Mode != plan.ModeHardware || pl.Servers() >= workers {
					t.Errorf("loki at %d QPS: mode %s on %d servers, want hardware scaling on fewer than %d", qps,
						pl.Mode, pl.Servers(), workers)
				}
			case "inferline":
				for _, v := range pl.Variants {
					if m := spec.Task(v.Task).MostAccurate().Name; v.Variant != m {
						t.Errorf("inferline hosts %s/%s, not the most accurate (%s)", v.Task, v.Variant, m)
					}
				}
			case "proteus":
				if pl.Servers() != workers {
					t.Errorf("proteus plans %d servers, want the whole cluster (%d)", pl.Servers(), workers)
				}
			case "cg-mean", "cg-peak":
				// Whole units: one replica of each task's most accurate variant per unit.
				per := map[string]int{}
				for _, v := range pl.Variants {
					if m := spec.Task(v.Task).MostAccurate().Name; v.Variant != m {
						t.Errorf("%s hosts %s/%s, not the most accurate (%s)", want.Name, v.Task, v.Variant, m)
					}
					per[v.Task] += v.Replicas
				}
				units := per[spec.Tasks[0].Name]
				for _, task := range spec.Tasks {
					if per[task.Name] != units || units == 0 {
						t.Errorf("%s: servers per task %v, want the same whole number of units on each", want.Name, per)
						break
					}
				}
			case "static":
				if pl.Mode != plan.ModeStatic {
					t.Errorf("static: plan mode %s", pl.Mode)
				}
			default:
				t.Fatalf("no check for system %s", kind.Name)
			}

			// The same system by the same name in the simulator, under the same demand.
			res, err := sim.Run(sim.Config{Spec: spec, Workload: workload.Constant(qps, 20*time.Second),
				Warmup: 5 * time.Second, Servers: workers, System: kind.Name, Seed: 1, CommLatency: -1})
			if err != nil {
				t.Fatal(err)
			}
			s := res.Summary
			if s.System != want.Name || s.Requests == 0 || s.SLOViolationRatio > 0.01 {
				t.Errorf("simulated %s: %+v", want.Name, s)
			}
			t.Logf("simulated %s: %.2f%% SLO violations, %.1f servers on average", s.System,
				100*s.SLOViolationRatio, s.MeanActiveServers)
		})
	}
}
