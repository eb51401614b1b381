package emulated

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

const treeSpec = `
name: t
slo_ms: 500
batch_sizes: [1, 4]
tasks:
  - name: detect
    children: [cars, faces]
    variants:
      - name: big
        accuracy: 0.9
        executor: {kind: emulated}
        fanout: {mean: 3, shares: {cars: 0.7, faces: 0.3}}
        profile:
          - {batch: 1, p50_ms: 20, p95_ms: 30}
          - {batch: 4, p50_ms: 50, p95_ms: 60}
      - name: fixed
        accuracy: 0.8
        executor: {kind: emulated}
        fanout: {mean: 2, distribution: fixed, shares: {cars: 0.5, faces: 0.5}}
        profile:
          - {batch: 1, p50_ms: 10, p95_ms: 12}
          - {batch: 4, p50_ms: 30, p95_ms: 36}
      - name: crowd
        accuracy: 0.95
        executor: {kind: emulated}
        fanout: {mean: 18, distribution: negative-binomial, dispersion: 2.5, shares: {cars: 0.9, faces: 0.1}}
        profile:
          - {batch: 1, p50_ms: 30, p95_ms: 36}
          - {batch: 4, p50_ms: 60, p95_ms: 72}
  - name: cars
    variants:
      - name: c
        accuracy: 0.9
        executor: {kind: emulated}
        profile:
          - {batch: 1, p50_ms: 5, p95_ms: 6}
          - {batch: 4, p50_ms: 10, p95_ms: 12}
  - name: faces
    variants:
      - name: f
        accuracy: 0.9
        executor: {kind: emulated}
        profile:
          - {batch: 1, p50_ms: 5, p95_ms: 6}
          - {batch: 4, p50_ms: 10, p95_ms: 12}
`

func loadTree(t *testing.T) *pipeline.Spec {
	t.Helper()
	spec, err := pipeline.Parse([]byte(treeSpec))
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestEmulatedLatency checks the jitter: the sampled latencies have the profiled p50 and p95.
func TestEmulatedLatency(t *testing.T) {
	spec := loadTree(t)
	tests := []struct {
		batch            int
		wantP50, wantP95 float64
	}{
		{1, 20, 30},
		{3, 50, 60}, // a batch of 3 takes the time of the next profiled size, 4
		{4, 50, 60},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.batch), func(t *testing.T) {
			e := New(spec, "detect", spec.Variant("detect", "big"), 7)
			const n = 20000
			ms := make([]float64, n)
			for i := range ms {
				ms[i] = float64(e.Latency(tc.batch)) / float64(time.Millisecond)
			}
			sort.Float64s(ms)
			p50, p95 := ms[n/2], ms[n*95/100]
			if math.Abs(p50-tc.wantP50)/tc.wantP50 > 0.03 || math.Abs(p95-tc.wantP95)/tc.wantP95 > 0.03 {
				t.Errorf("p50 %.2f p95 %.2f, want %.0f and %.0f (within 3%%)", p50, p95, tc.wantP50, tc.wantP95)
			}
		})
	}
}

// TestEmulatedFanout checks the sub-requests: the profiled mean and variance (Poisson: the mean; negative binomial:
// mean + mean^2/dispersion), split by the shares, the same for the same item.
func TestEmulatedFanout(t *testing.T) {
	spec := loadTree(t)
	tests := []struct {
		variant         string
		mean, carsShare float64
		variance        float64
		fixed           bool
	}{
		{"big", 3, 0.7, 3, false},
		{"fixed", 2, 0.5, 0, true},
		{"crowd", 18, 0.9, 18 + 18*18/2.5, false},
	}
	for _, tc := range tests {
		t.Run(tc.variant, func(t *testing.T) {
			e := New(spec, "detect", spec.Variant("detect", tc.variant), 11)
			e.sleep = func(context.Context, time.Duration) error { return nil }
			const n = 20000
			batch := make([]executor.Input, n)
			for i := range batch {
				batch[i] = executor.Input{RequestID: fmt.Sprint("r", i), ItemID: "0"}
			}
			outs, err := e.Execute(context.Background(), batch)
			if err != nil {
				t.Fatal(err)
			}
			total, cars, squares := 0, 0, 0
			for _, o := range outs {
				squares += o.NumChildren() * o.NumChildren()
				if tc.fixed && o.NumChildren() != int(tc.mean) {
					t.Fatalf("fixed fan-out emitted %d, want %v", o.NumChildren(), tc.mean)
				}
				total += o.NumChildren()
				cars += len(o.Children["cars"])
				if len(o.Tensors) == 0 {
					t.Fatal("an item has no output tensor")
				}
			}
			mean := float64(total) / n
			if math.Abs(mean-tc.mean) > 0.02*tc.mean {
				t.Errorf("mean fan-out %.3f, want %v", mean, tc.mean)
			}
			if v := float64(squares)/n - mean*mean; math.Abs(v-tc.variance) > 0.08*tc.variance+0.01 {
				t.Errorf("fan-out variance %.3f, want %.3f", v, tc.variance)
			}
			if share := float64(cars) / float64(total); math.Abs(share-tc.carsShare) > 0.02 {
				t.Errorf("cars share %.3f, want %v", share, tc.carsShare)
			}
			// Deterministic per item, whatever the batch: a redelivered item emits the same sub-requests.
			again, _ := e.Execute(context.Background(), batch[5:6])
			if again[0].NumChildren() != outs[5].NumChildren() || len(again[0].Children["cars"]) != len(outs[5].Children["cars"]) {
				t.Error("the same item emitted different sub-requests when executed again")
			}
		})
	}
}

func TestEmulatedSleepsAndStops(t *testing.T) {
	spec := loadTree(t)
	e := New(spec, "cars", spec.Variant("cars", "c"), 1)
	start := time.Now()
	if _, err := e.Execute(context.Background(), []executor.Input{{RequestID: "r", ItemID: "0"}}); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 2*time.Millisecond {
		t.Errorf("a 5 ms batch returned after %v", time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Execute(ctx, []executor.Input{{RequestID: "r", ItemID: "0"}}); err == nil {
		t.Error("a cancelled batch did not fail")
	}
	if _, err := executor.New(spec, "cars", "nope", executor.Options{}); err == nil {
		t.Error("an unknown variant was accepted")
	}
}

// TestLateSleepsAreMadeUp: on a machine where every sleep ends 3 ms late (a fake clock: the sleep advances it by
// what was asked plus 3 ms), the executor's batches still take their profiled latency on average, as the worker
// measures them around Execute; without the make-up they would take 3 ms more each.
func TestLateSleepsAreMadeUp(t *testing.T) {
	spec := loadTree(t)
	v := spec.Variant("detect", "big")
	e := New(spec, "detect", v, 5)
	clock := time.Unix(0, 0)
	const slack = 3 * time.Millisecond
	e.now = func() time.Time { return clock }
	e.sleep = func(_ context.Context, d time.Duration) error { clock = clock.Add(d + slack); return nil }
	batch := []executor.Input{{RequestID: "r", ItemID: "0"}}
	var took, want time.Duration
	const warm, n = 50, 500
	for i := range warm + n {
		start := clock
		// The draw Execute will make, from a twin executor's identical jitter stream.
		if _, err := e.Execute(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		if i >= warm {
			took += clock.Sub(start)
		}
	}
	twin := New(spec, "detect", v, 5)
	for i := range warm + n {
		d := twin.Latency(1)
		if i >= warm {
			want += d
		}
	}
	mean, profiled := took/n, want/n
	if diff := mean - profiled; diff < -slack/10 || diff > slack/10 {
		t.Errorf("batches took %v on average, their draws %v: want within %v", mean, profiled, slack/10)
	}
}
