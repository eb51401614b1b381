package routing

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

const queueSpec = `
name: q
slo_ms: 1000
batch_sizes: [1, 2, 4, 8]
tasks:
  - name: car
    variants:
      - name: big
        accuracy: 0.9
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 3, p95_ms: 4}, {batch: 2, p50_ms: 4, p95_ms: 5},
                  {batch: 4, p50_ms: 6, p95_ms: 7}, {batch: 8, p50_ms: 10, p95_ms: 11}]
      - name: small
        accuracy: 0.8
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 1, p95_ms: 2}, {batch: 2, p50_ms: 2, p95_ms: 3},
                  {batch: 4, p50_ms: 3, p95_ms: 4}, {batch: 8, p50_ms: 5, p95_ms: 6}]
      - name: idle
        accuracy: 0.95
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 1, p95_ms: 1}, {batch: 2, p50_ms: 1, p95_ms: 1},
                  {batch: 4, p50_ms: 1, p95_ms: 1}, {batch: 8, p50_ms: 1, p95_ms: 1}]
allocation:
  - {task: car, variant: small, replicas: 1, max_batch: 8}
  - {task: car, variant: big, replicas: 4, max_batch: 8}
`

type depths map[string]float64

func (d depths) Depth(_, variant string) (float64, bool) {
	n, ok := d[variant]
	return n, ok
}

// TestChooseByQueue: the options are the hosted variants, most accurate first (idle is not hosted); an item joins
// the most accurate whose expected completion (full rounds of batches ahead on every replica, then its own batch,
// p95) fits half its time left; when none fits or a queue is unknown, the tables decide.
func TestChooseByQueue(t *testing.T) {
	spec, err := pipeline.Parse([]byte(queueSpec))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	opts := QueueOptions(spec, p, "car")
	if len(opts) != 2 || opts[0].Variant != "big" || opts[1].Variant != "small" {
		t.Fatalf("options %+v: want big then small", opts)
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		depth float64
		want  time.Duration
	}{
		{0, 4 * ms},        // alone: a batch of 1
		{3, 4 * ms},        // 3 ahead on 4 replicas: each its own batch of 1
		{8, 7 * ms},        // 9 items over 4 replicas: a batch of 3, at 4's latency (the next profiled size)
		{31, 11 * ms},      // the 32nd: a full round
		{32, 11*ms + 4*ms}, // one full round ahead, then alone
		{40, 11*ms + 7*ms}, // one round, then 9 over 4 replicas: a batch of 3, at 4's latency
	} {
		if got := opts[0].Completion(tc.depth); got != tc.want {
			t.Errorf("big, %v ahead: %v, want %v", tc.depth, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name   string
		q      depths
		left   time.Duration
		want   string
		wantOK bool
	}{
		{"the accurate one fits", depths{"big": 31, "small": 0}, 22 * ms, "big", true},
		{"its queue is too long: the next", depths{"big": 40, "small": 0}, 22 * ms, "small", true},
		{"none fits: the tables", depths{"big": 40, "small": 100}, 22 * ms, "", false},
		{"a queue not measured: the tables", depths{"small": 0}, time.Second, "", false},
	} {
		if got, ok := ChooseByQueue("car", opts, tc.q, tc.left); got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: %q %v, want %q %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
}
