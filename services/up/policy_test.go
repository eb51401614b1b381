package up

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// lateChain: a (300 ms) -> b, where b has a slow accurate variant (600 ms) and a fast one (30 ms), one replica each,
// batch size 1, latencies without spread. The SLO of 1350 ms stretches the budgets by 1.5 (1350 / (300 + 600)): an
// item may spend 450 ms at a. (The times are long so that every outcome below has 150 ms to spare: at a third of
// them, a loaded 2-core machine running the race detector missed 50 ms margins.)
const lateChain = `
name: late
slo_ms: 1350
tasks:
  - name: a
    children: [b]
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1, distribution: fixed},
         profile: [{batch: 1, p50_ms: 300, p95_ms: 300}]}
  - name: b
    variants:
      - {name: slow, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 600, p95_ms: 600}]}
      - {name: fast, accuracy: 0.7, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 30, p95_ms: 30}]}
allocation:
  - {task: a, variant: x, replicas: 1, max_batch: 1}
  - {task: b, variant: slow, replicas: 1, max_batch: 1}
  - {task: b, variant: fast, replicas: 1, max_batch: 1}
`

// burst runs the pipeline of spec (YAML) on workers workers under deadline policy policy, sends it n requests at
// once with timeout timeout, and returns the system and their replies, in order.
func burst(t *testing.T, spec, policy string, workers, n int, timeout string) (*System, []wire.InferReply) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "burst.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	sys, s := startSystemWith(t, file, Config{Workers: workers}, func(s *pipeline.Spec) { s.DeadlinePolicy = policy })
	c := newClient(t, sys)
	hdr := nats.Header{}
	hdr.Set(wire.HeaderTimeout, timeout)
	var subjects []string
	for range n {
		subjects = append(subjects, c.Send(t, s.Name, inputRequest(t), hdr))
	}
	replies := c.Wait(t, subjects, 5*time.Second)
	out := make([]wire.InferReply, len(subjects))
	for i, sub := range subjects {
		out[i] = decodeReply(t, replies[sub][0])
	}
	return sys, out
}

// TestDeadlinePoliciesOnABurst sends a burst of 5 requests with a 1650 ms timeout. Request k reaches a's worker at
// once and leaves it at k*300 ms, so from the second on it overruns a's allotment (450 ms) by 150, 450, 750 and
// 1050 ms. The routing table sends b to slow (600 ms, allotted 900); fast (30 ms, allotted 45) has room.
//   - none: slow finishes request 1 at 900 ms, 2 at 1500, 3 at 2100: requests 3-5 are late.
//   - per-task: requests 2-5 will overrun a's allotment: dropped before a executes them.
//   - reroute: request 2 has 1050 ms left when it leaves a, time for slow's allotment, and makes it (at 1500 ms);
//     requests 3-5 have 750, 450 and 150 ms left, too little for slow, enough for fast: rerouted there.
//
// So reroute serves requests per-task drops (2-5) and that none delivers late (3-5).
func TestDeadlinePoliciesOnABurst(t *testing.T) {
	type outcome struct {
		status string
		leaf   string // the variant of b that served it, or the reason it was dropped
	}
	run := func(policy string) []outcome {
		sys, reps := burst(t, lateChain, policy, 3, 5, "1650ms")
		var out []outcome
		for _, rep := range reps {
			o := outcome{status: rep.Status}
			wantAcc := map[string]float64{"b/slow": 0.9 * 0.9, "b/fast": 0.9 * 0.7}
			if rep.Status == wire.StatusOK && len(rep.Results) == 1 && len(rep.Results[0].Path) == 2 {
				if w := wantAcc[rep.Results[0].Path[1]]; math.Abs(rep.Accuracy-w) > 1e-9 {
					t.Errorf("%s: reply accuracy %v, want %v", policy, rep.Accuracy, w)
				}
			}
			if len(rep.Results) == 1 {
				o.leaf = rep.Results[0].Reason
				if p := rep.Results[0].Path; rep.Results[0].Status == wire.ItemOK && len(p) == 2 {
					o.leaf = p[1]
				}
			}
			out = append(out, o)
		}
		t.Logf("%-8s %v", policy, out)
		// What the worker of a/x counted for its variant.
		for _, w := range sys.Workers {
			if w.Serving() != "late:a/x" {
				continue
			}
			o := w.Observations()["late:a/x"]
			want := map[string][2]uint64{"none": {0, 0}, "per-task": {0, 4}, "reroute": {3, 0}}[policy]
			if o.Rerouted != want[0] || o.Dropped[wire.DropBudget] != want[1] {
				t.Errorf("%s: a/x counted %d reroutes and %d over-budget drops, want %d and %d", policy, o.Rerouted,
					o.Dropped[wire.DropBudget], want[0], want[1])
			}
		}
		return out
	}
	ok := func(variant string) outcome { return outcome{wire.StatusOK, variant} }
	late := outcome{wire.StatusLate, ""}
	overBudget := outcome{wire.StatusDropped, wire.DropBudget}
	want := map[string][]outcome{
		"none":     {ok("b/slow"), ok("b/slow"), late, late, late},
		"per-task": {ok("b/slow"), overBudget, overBudget, overBudget, overBudget},
		"reroute":  {ok("b/slow"), ok("b/slow"), ok("b/fast"), ok("b/fast"), ok("b/fast")},
	}
	for _, policy := range []string{"none", "per-task", "reroute"} {
		got := run(policy)
		for i := range got {
			w := want[policy][i]
			if got[i].status != w.status || (w.leaf != "" && got[i].leaf != w.leaf) {
				t.Errorf("%s: request %d: %+v, want %+v", policy, i+1, got[i], w)
			}
		}
	}
}
