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

// lateChain: a (600 ms) -> b, where b has a slow accurate variant (1200 ms) and a fast one (60 ms), one replica each,
// batch size 1, latencies without spread. The SLO of 2700 ms stretches the budgets by 1.5 (2700 / (600 + 1200)): an
// item may spend 900 ms at a. (The times are long so that every outcome below has 210 ms or more to spare: a loaded
// 2-core machine running the race detector missed 50 ms margins, and once, at a load average of 10, 105 ms.)
const lateChain = `
name: late
slo_ms: 2700
tasks:
  - name: a
    children: [b]
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1, distribution: fixed},
         profile: [{batch: 1, p50_ms: 600, p95_ms: 600}]}
  - name: b
    variants:
      - {name: slow, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 1200, p95_ms: 1200}]}
      - {name: fast, accuracy: 0.7, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 60, p95_ms: 60}]}
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
	replies := c.Wait(t, subjects, 10*time.Second)
	out := make([]wire.InferReply, len(subjects))
	for i, sub := range subjects {
		out[i] = decodeReply(t, replies[sub][0])
	}
	return sys, out
}

// TestDeadlinePoliciesOnABurst sends a burst of 5 requests with a 3300 ms timeout. Request k reaches a's worker at
// once and leaves it at k*600 ms, so from the second on it overruns a's allotment (900 ms) by 300, 900, 1500 and
// 2100 ms. The routing table sends b to slow (1200 ms, allotted 1800); fast (60 ms, allotted 90) has room.
//   - none: slow finishes request 1 at 1800 ms, 2 at 3000, 3 at 4200: requests 3-5 are late.
//   - per-task: requests 2-5 will overrun a's allotment: dropped before a executes them.
//   - reroute: request 2 has 2100 ms left when it leaves a, time for slow's allotment, and makes it (at 3000 ms);
//     requests 3-5 have 1500, 900 and 300 ms left, too little for slow, enough for fast: rerouted there.
//
// So reroute serves requests per-task drops (2-5) and that none delivers late (3-5).
func TestDeadlinePoliciesOnABurst(t *testing.T) {
	type outcome struct {
		status string
		leaf   string // the variant of b that served it, or the reason it was dropped
	}
	run := func(policy string) []outcome {
		sys, reps := burst(t, lateChain, policy, 3, 5, "3300ms")
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
