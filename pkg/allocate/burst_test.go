package allocate

import (
	"reflect"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

func TestBurstOptions(t *testing.T) {
	for _, tc := range []struct {
		k, b, servers int
		want          []burstOption
	}{
		{1, 8, 20, []burstOption{{1, 1}}},                          // one at a time: one round on one replica
		{8, 8, 20, []burstOption{{1, 1}}},                          // a burst that fits a batch
		{18, 8, 20, []burstOption{{1, 3}, {2, 2}, {3, 1}}},         // 3 messages: 1, 2 or 3 rounds deep
		{41, 8, 20, []burstOption{{1, 6}, {2, 3}, {3, 2}, {6, 1}}}, // 6 messages; 4 and 5 rounds need 2 replicas too
		{41, 8, 4, []burstOption{{2, 3}, {3, 2}, {6, 1}}},          // not more replicas than servers
	} {
		if got := burstOptions(tc.k, tc.b, tc.servers); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("burstOptions(%d, %d, %d) = %v, want %v", tc.k, tc.b, tc.servers, got, tc.want)
		}
	}
}

// TestCameraPlanCoversBursts: at a low demand the traffic camera's hardware plan hosts the replicas its bursts and
// queues need. yolov8x finds 18 vehicles a frame on average, 41 in one frame of twenty (negative binomial), which
// go in 6 messages of at most 8 for convnext_b: 6 replicas run such a frame in one batch latency. The detector,
// unbatched at 72 ms, is fed 9 frames a second: one replica would be 65% busy, and an item would wait for several
// batches before its own more often than not. Loki's model alone hosted 1 detector and 2 classifiers here.
func TestCameraPlanCoversBursts(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic-camera.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Solve(Input{Spec: spec, Demand: 9, Servers: 20, Utilization: 0.85}, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != ModeHardware || len(res.Variants) != 2 {
		t.Fatalf("want a hardware plan of yolov8x and convnext_b, got %+v", res)
	}
	det, cls := res.Variants[0], res.Variants[1]
	if det.Replicas < 2 {
		t.Errorf("detector: %d replicas at 9 QPS, want at least 2", det.Replicas)
	}
	if need := (41 + cls.BatchSize - 1) / cls.BatchSize; cls.Replicas < need {
		t.Errorf("classifier: %d replicas at max batch %d, want at least %d for a burst of 41", cls.Replicas,
			cls.BatchSize, need)
	}
	if det.LatencyMs+cls.LatencyMs > spec.SLOMs/2 {
		t.Errorf("plan's batch latencies %.1f + %.1f ms exceed half the SLO", det.LatencyMs, cls.LatencyMs)
	}
}
