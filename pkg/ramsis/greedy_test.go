package ramsis

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
)

// twoSpec is one task with an accurate, slow variant on 2 replicas and a fast one on 2, both at max batch 8.
const twoSpec = `
name: two
slo_ms: 200
comm_latency_ms: 1
batch_sizes: [1, 2, 4, 8]
tasks:
  - name: cls
    variants:
      - name: big
        accuracy: 0.9
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 20, p95_ms: 24}, {batch: 2, p50_ms: 28, p95_ms: 33.6},
                  {batch: 4, p50_ms: 44, p95_ms: 52.8}, {batch: 8, p50_ms: 76, p95_ms: 91.2}]
      - name: small
        accuracy: 0.8
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 8, p95_ms: 9.6}, {batch: 2, p50_ms: 11, p95_ms: 13.2},
                  {batch: 4, p50_ms: 17, p95_ms: 20.4}, {batch: 8, p50_ms: 29, p95_ms: 34.8}]
allocation:
  - {task: cls, variant: big, replicas: 2, max_batch: 8}
  - {task: cls, variant: small, replicas: 2, max_batch: 8}
`

// twoChoice is the policy of twoSpec's task at demand QPS, with the plan's routing tables (most accurate first).
func twoChoice(t testing.TB, demand float64) (*Choice, *plan.Plan, Model) {
	t.Helper()
	spec, err := pipeline.Parse([]byte(twoSpec))
	if err != nil {
		t.Fatal(err)
	}
	spec.RoutingMode = routing.ModeRAMSIS
	p, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	p.Allocation = &plan.Allocation{DemandQPS: demand}
	p.Routing = routing.MostAccurateFirst(routing.Input{Spec: spec, Plan: p, Demand: demand})
	ch, err := For(spec, p, "cls", time.Now)
	if err != nil || ch == nil {
		t.Fatalf("policy: %v, %v", ch, err)
	}
	m, _, _ := ModelOf(spec, p, "cls")
	return ch, p, m
}

type itemDepths map[string]float64

func (d itemDepths) Depth(_, v string) (float64, bool) { x, ok := d[v]; return x, ok }

// rollout follows the model from backlogs w for items items, the first sent to first, the others where choose
// says, and returns the accuracy they got (Miss for a late one); arrivals from rng.
func rollout(m Model, w []time.Duration, first int, items int, choose func([]time.Duration, time.Duration) int,
	rng *rand.Rand) float64 {
	w = append([]time.Duration(nil), w...)
	got := 0.0
	shape := 1 / (m.CV * m.CV)
	for n := range items {
		slack := m.Slacks[rng.IntN(len(m.Slacks))]
		a := first
		if n > 0 {
			a = choose(w, slack)
		}
		o := m.Options[a]
		if o.Completion(w[a]) <= slack {
			got += o.Accuracy
		} else {
			got += m.Miss
		}
		w[a] += o.Work
		gap := time.Duration(gammaDraw(rng, shape) / (m.Rate * shape) * float64(time.Second))
		for i := range w {
			w[i] = max(0, w[i]-gap)
		}
	}
	return got
}

// TestPolicyBeatsGreedyLater: a state where the greedy rule's choice (routing.ChooseByQueue, the tables when
// nothing fits) loses accuracy later. At 120 QPS the tables send every item to big; with 36 items queued at big and
// 108 at small, the item is late at either (no reward now, whatever the choice). Nothing fits half its slack, so the
// greedy rule follows the table to big, where the item holds up the items behind it, which would have fitted; the
// value function sends it to small, whose queue is late anyway. Rollouts of the model from that state (the same
// arrivals for both choices, the policy deciding afterwards) say what each choice is worth: small more, by more than
// three standard errors. With the greedy rule in place of the policy, the choices are the same and the test fails.
func TestPolicyBeatsGreedyLater(t *testing.T) {
	ch, p, m := twoChoice(t, 120)
	d := itemDepths{"big": 36, "small": 108}
	w := []time.Duration{time.Duration(36 * float64(m.Options[0].Work)), time.Duration(108 * float64(m.Options[1].Work))}
	slack := m.Slacks[0]
	for a, o := range m.Options {
		if o.Completion(w[a]) <= slack {
			t.Fatalf("%s: the item fits (%v <= %v): want it late at both", o.Variant, o.Completion(w[a]), slack)
		}
	}
	greedy, ok := routing.ChooseByQueue("cls", ch.Options, d, slack)
	if !ok {
		greedy = plan.Pick(p.Routing.Root, 0.5)
	}
	chosen, ok := ch.Choose(d, "cls", slack, make([]time.Duration, 2))
	if !ok || greedy != "big" || chosen != "small" {
		t.Fatalf("greedy rule: %s, policy: %s (%v); want big and small", greedy, chosen, ok)
	}
	policy := func(w []time.Duration, slack time.Duration) int { return ch.Policy.Choose(w, slack) }
	const runs, items = 500, 200
	var diffs []float64
	for r := range runs {
		big := rollout(m, w, 0, items, policy, rand.New(rand.NewPCG(uint64(r), 1)))
		small := rollout(m, w, 1, items, policy, rand.New(rand.NewPCG(uint64(r), 1)))
		diffs = append(diffs, small-big)
	}
	mean, ss := 0.0, 0.0
	for _, x := range diffs {
		mean += x / runs
	}
	for _, x := range diffs {
		ss += (x - mean) * (x - mean)
	}
	se := math.Sqrt(ss/(runs-1)) / math.Sqrt(runs)
	t.Logf("the next %d items' accuracy, small less big: %.3f (standard error %.3f)", items, mean, se)
	if mean <= 3*se {
		t.Errorf("sending the item to small gains %.3f accuracy over the next %d items (standard error %.3f): "+
			"want more than 3 standard errors", mean, items, se)
	}
}
