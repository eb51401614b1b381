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

// TestLokiLatencyModel: the paper's formulation (--latency-model loki) budgets every variant at its profiled p50
// per batch, in one round, with no replicas a burst needs and no queueing headroom, where the burst model on the
// same high-fan-out pipeline has all three; and on the traffic example in accuracy mode it plans at least the burst
// model's accuracy, since it leaves out the burst model's constraints.
func TestLokiLatencyModel(t *testing.T) {
	camera, err := pipeline.Load("../../examples/traffic-camera.yaml")
	if err != nil {
		t.Fatal(err)
	}
	burstTerms := func(m *model) (rounds, replicas, headroom int) {
		for _, kv := range m.variants {
			for bi := range kv.batches {
				if kv.rounds[bi] > 1 || kv.latencyMs[bi] != kv.p50Ms[bi] {
					rounds++
				}
				if kv.minReplicas[bi] > 1 {
					replicas++
				}
				if kv.headroom[bi] > 0 {
					headroom++
				}
			}
		}
		return
	}
	for _, st := range []step{stepHardware, stepAccuracy} {
		in := Input{Spec: camera, Demand: 60, Servers: 20}
		m, err := build(in, st)
		if err != nil {
			t.Fatal(err)
		}
		if r, n, h := burstTerms(m); r == 0 || n == 0 || h == 0 {
			t.Fatalf("step %d, burst model: %d options in rounds, %d with burst replicas, %d with headroom: "+
				"the camera's fan-out should need all three", st, r, n, h)
		}
		in.LatencyModel = LatencyLoki
		if m, err = build(in, st); err != nil {
			t.Fatal(err)
		}
		if r, n, h := burstTerms(m); r+n+h != 0 {
			t.Errorf("step %d, loki model: %d options in rounds, %d with burst replicas, %d with headroom; want none",
				st, r, n, h)
		}
	}

	traffic, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, demand := range []float64{400, 700} {
		acc := map[LatencyModel]float64{}
		for _, lm := range []LatencyModel{LatencyBurst, LatencyLoki} {
			res, err := Solve(Input{Spec: traffic, Demand: demand, Servers: 20, LatencyModel: lm}, Options{Workers: 1})
			if err != nil {
				t.Fatal(err)
			}
			if res.Mode != ModeAccuracy || res.LatencyModel != lm || res.Plan("traffic", 1).Allocation.LatencyModel != string(lm) {
				t.Fatalf("%v QPS, %s: mode %s, model %q", demand, lm, res.Mode, res.LatencyModel)
			}
			acc[lm] = res.SystemAccuracy
		}
		if acc[LatencyLoki] < acc[LatencyBurst]-1e-6 {
			t.Errorf("%v QPS: the paper's model plans accuracy %.4f, below the burst model's %.4f", demand,
				acc[LatencyLoki], acc[LatencyBurst])
		}
		t.Logf("%v QPS: accuracy %.4f (loki) against %.4f (burst)", demand, acc[LatencyLoki], acc[LatencyBurst])
	}
	if _, err := Solve(Input{Spec: traffic, Demand: 10, Servers: 20, LatencyModel: "paper"}, Options{}); err == nil {
		t.Error("an unknown latency model was accepted")
	}
}

// TestHeadroomGrowsWithDispersion: requests twice as dispersed as Poisson's need twice the root's headroom; a task
// below gets (d-1) times the mean burst more in its index of dispersion; Loki's model keeps none whatever the arrivals.
func TestHeadroomGrowsWithDispersion(t *testing.T) {
	poisson := oneAtATime.headroom(100, 300, 1)
	if got := oneAtATime.headroom(100, 300, 2); got < 2*poisson-1e-9 || got > 2*poisson+1e-9 {
		t.Errorf("root headroom at dispersion 2: %v, want %v", got, 2*poisson)
	}
	fixed3 := arrivals{pmf: []float64{0, 0, 0, 1}, mean: 3} // every parent item sends 3: m2/m1 = 3
	if r := fixed3.headroom(100, 300, 16) / fixed3.headroom(100, 300, 1); r < 16-1e-9 || r > 16+1e-9 {
		t.Errorf("bursts of 3 at dispersion 16: headroom %vx Poisson's, want (3 + 15*3)/3 = 16x", r)
	}
	in := Input{LatencyModel: LatencyLoki, ArrivalDispersion: 16}
	if h := in.headroom(oneAtATime, 100, 300); h != 0 {
		t.Errorf("loki model: headroom %v, want 0", h)
	}
	if err := (Input{Spec: &pipeline.Spec{}, Servers: 1, ArrivalDispersion: -1}).check(); err == nil {
		t.Error("a negative dispersion is accepted")
	}
}
