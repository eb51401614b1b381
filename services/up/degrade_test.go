package up

import (
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// degradeChain: a (100 ms) -> b (600 ms, one replica, no faster variant), batch size 1, latencies without spread. The
// SLO of 1400 ms stretches the budgets by 2: b's allotment is 1200 ms.
const degradeChain = `
name: slowleaf
slo_ms: 1400
tasks:
  - name: a
    children: [b]
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1, distribution: fixed},
         profile: [{batch: 1, p50_ms: 100, p95_ms: 100}]}
  - name: b
    variants:
      - {name: slow, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 600, p95_ms: 600}]}
allocation:
  - {task: a, variant: x, replicas: 1, max_batch: 1}
  - {task: b, variant: slow, replicas: 1, max_batch: 1}
`

// TestDegradeAnswersWithWhatItHas sends a burst of 3 requests with an 1800 ms timeout. They leave a at 100, 200 and
// 300 ms, each with time for b's allotment (1500 ms left or more: 300 to spare). b runs request 1 from 100 to 700 ms
// and request 2 from 700 to 1300 (due at 1800); request 3 then has 500 ms left, less than b takes: reroute drops it
// (no-time-for-last, 100 ms to spare), degrade answers it with what a made for it: status degraded, its path a's,
// its outputs the tensors a emitted, its accuracy 0 (the classification it lacks).
func TestDegradeAnswersWithWhatItHas(t *testing.T) {
	run := func(policy string) []wire.InferReply {
		sys, out := burst(t, degradeChain, policy, 2, 3, "1800ms")
		for _, w := range sys.Workers {
			if o, ok := w.Observations()["slowleaf:b/slow"]; ok && policy == "degrade" &&
				o.Degraded[wire.DropLastTask] != 1 {
				t.Errorf("b/slow counted %v degraded, want 1 no-time-for-last", o.Degraded)
			}
		}
		return out
	}
	for _, policy := range []string{"reroute", "degrade"} {
		reps := run(policy)
		for i, rep := range reps[:2] {
			if rep.Status != wire.StatusOK {
				t.Errorf("%s: request %d: %s, want ok", policy, i+1, rep.Status)
			}
		}
		rep := reps[2]
		t.Logf("%s: request 3: %s %+v", policy, rep.Status, rep.Results)
		if len(rep.Results) != 1 {
			t.Fatalf("%s: request 3: %d results, want 1", policy, len(rep.Results))
		}
		leaf := rep.Results[0]
		want, wantLeaf := wire.StatusDropped, wire.ItemDropped
		if policy == "degrade" {
			want, wantLeaf = wire.StatusDegraded, wire.ItemDegraded
		}
		if rep.Status != want || leaf.Status != wantLeaf || leaf.Reason != wire.DropLastTask || rep.Accuracy != 0 {
			t.Errorf("%s: request 3: %s, leaf %s (%s), accuracy %v: want %s, leaf %s (%s), accuracy 0", policy,
				rep.Status, leaf.Status, leaf.Reason, rep.Accuracy, want, wantLeaf, wire.DropLastTask)
		}
		if policy == "degrade" && (len(leaf.Path) != 1 || leaf.Path[0] != "a/x" || len(leaf.Outputs) == 0) {
			t.Errorf("degrade: request 3's leaf: path %v, %d outputs: want a's path and what a emitted",
				leaf.Path, len(leaf.Outputs))
		}
	}
}
