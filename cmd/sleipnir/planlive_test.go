package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/latency"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestPlanLiveShowsMeasuredLatencies: `plan --live` reads the spec, the plan in force and the workers' heartbeats
// from a running system's bucket, and prints a hosted variant's latency as profiled, as measured and as planned.
func TestPlanLiveShowsMeasuredLatencies(t *testing.T) {
	s := testrig.Server(t, testrig.Listen())
	nc := s.Connect(t, "setup")
	ctx := t.Context()
	kv, err := bus.OpenBucket(ctx, testrig.JetStream(t, nc), jetstream.MemoryStorage, 0)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	pl.Epoch = 7
	vp := pl.Variants[0]
	hop := wire.VariantKey{Task: vp.Task, Variant: vp.Variant}.String()
	p1 := spec.Variant(vp.Task, vp.Variant).Profile[0]
	measured := map[string][]wire.BatchLatency{hop: {{Batch: p1.Batch, Count: 40, P50Ms: 3 * p1.P50Ms,
		P95Ms: 3 * p1.P95Ms}}}
	pl.Profiles = latency.Blend(spec, measured)
	reg := wire.Registration{ID: "w1", Class: "cpu", Started: time.Now(), Updated: time.Now(), Heartbeat: 1,
		Variant: spec.Name + ":" + hop, Observed: map[string]wire.Observed{spec.Name + ":" + hop: {Latency: measured[hop]}}}
	for key, v := range map[string]any{wire.SpecKey(spec.Name): spec, wire.PlanKey(spec.Name): pl,
		wire.WorkerKey("w1"): reg} {
		data, _ := json.Marshal(v)
		if _, err := kv.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	c := common{natsURL: s.URL()}
	var out bytes.Buffer
	if err := showLivePlan(&c, spec.Name, &out); err != nil {
		t.Fatal(err)
	}
	planned := pl.Profiles[hop][0]
	for _, want := range []string{"plan 7 of " + spec.Name, hop,
		fmt.Sprintf("%.1f/%.1f", p1.P50Ms, p1.P95Ms),
		fmt.Sprintf("40  %.1f/%.1f", 3*p1.P50Ms, 3*p1.P95Ms),
		fmt.Sprintf("%.1f/%.1f", planned.P50Ms, planned.P95Ms),
		// w1 says it is of class cpu and serves a default-class variant: shown, and marked.
		"cpu    1        1        w1: " + hop + " !"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	if err := showLivePlan(&c, "nope", &out); err == nil {
		t.Error("a pipeline the system does not serve: no error")
	}
}
