package up

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// lateChain: a (100 ms) -> b, where b has a slow accurate variant (200 ms) and a fast one (10 ms), one replica each,
// batch size 1, latencies without spread. The SLO of 450 ms stretches the budgets by 1.5 (450 / (100 + 200)): an
// item may spend 150 ms at a.
const lateChain = `
name: late
slo_ms: 450
tasks:
  - name: a
    children: [b]
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1, distribution: fixed},
         profile: [{batch: 1, p50_ms: 100, p95_ms: 100}]}
  - name: b
    variants:
      - {name: slow, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 200, p95_ms: 200}]}
      - {name: fast, accuracy: 0.7, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 10, p95_ms: 10}]}
allocation:
  - {task: a, variant: x, replicas: 1, max_batch: 1}
  - {task: b, variant: slow, replicas: 1, max_batch: 1}
  - {task: b, variant: fast, replicas: 1, max_batch: 1}
`

// TestDeadlinePoliciesOnABurst sends a burst of 5 requests with a 550 ms timeout. Request k leaves a at k*100 ms, so
// from the second on it is late at a (by 50, 150, 250, 350 ms). The routing table sends b to slow; fast has room.
//   - none: slow finishes request 1 at 300 ms, 2 at 500, 3 at 700: requests 3-5 are late.
//   - per-task: requests 2-5 overran a's budget: dropped.
//   - reroute: 2 and 3 can make up the time on fast (10 <= 200-50, 10 <= 200-150) and are served; 4 and 5 cannot.
//
// So reroute serves requests (2 and 3) that per-task drops and that none delivers late (3).
func TestDeadlinePoliciesOnABurst(t *testing.T) {
	file := filepath.Join(t.TempDir(), "late.yaml")
	if err := os.WriteFile(file, []byte(lateChain), 0o644); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		status string
		leaf   string // the variant of b that served it, or the reason it was dropped
	}
	run := func(policy string) []outcome {
		sys, spec := startSystemWith(t, file, Config{Workers: 3}, func(s *pipeline.Spec) { s.DeadlinePolicy = policy })
		c := newClient(t, sys)
		hdr := nats.Header{}
		hdr.Set(wire.HeaderTimeout, "550ms")
		var subjects []string
		for i := 0; i < 5; i++ {
			subjects = append(subjects, c.send(t, spec.Name, i, inputRequest(t), hdr))
		}
		replies := c.wait(t, subjects, 5*time.Second)
		var out []outcome
		for _, s := range subjects {
			rep := decodeReply(t, replies[s][0])
			o := outcome{status: rep.Status}
			if len(rep.Results) == 1 {
				o.leaf = rep.Results[0].Reason
				if p := rep.Results[0].Path; rep.Results[0].Status == wire.ItemOK && len(p) == 2 {
					o.leaf = p[1]
				}
			}
			out = append(out, o)
		}
		t.Logf("%-8s %v", policy, out)
		return out
	}
	ok := func(variant string) outcome { return outcome{wire.StatusOK, variant} }
	late := outcome{wire.StatusLate, ""}
	overBudget := outcome{wire.StatusDropped, wire.DropBudget}
	noFaster := outcome{wire.StatusDropped, wire.DropNoFaster}
	want := map[string][]outcome{
		"none":     {ok("b/slow"), ok("b/slow"), late, late, late},
		"per-task": {ok("b/slow"), overBudget, overBudget, overBudget, overBudget},
		"reroute":  {ok("b/slow"), ok("b/fast"), ok("b/fast"), noFaster, noFaster},
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
