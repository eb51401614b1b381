//go:build fidelity

// The fidelity check (make fidelity): the same workload on the live system and in the simulator. Not part of
// make test: it runs the whole system for about a minute at a steady load, which the race detector would distort.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/sim"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
	"github.com/sleipnir-serving/sleipnir/services/planner"
	"github.com/sleipnir-serving/sleipnir/services/up"
)

// TestFidelity runs a constant demand on the live system (embedded NATS, planner, frontend, 20 emulated workers,
// this load generator) and in the simulator (the mean of five seeds), and compares the mean accuracy (within 2%),
// the SLO-violation ratio (within 2 points) and the mean active servers (within 2%, or half a worker) over the
// measured part.
// On the traffic example 142 QPS is served by hardware scaling on 12 workers, 450 by accuracy scaling on all 20;
// the traffic camera's 27 and 72 QPS are 30% and 80% of its hardware-mode capacity (90 QPS), where the live run
// must also miss under 1% of its deadlines; and so are the social-media example's 84 and 224 QPS (280 QPS).
//
// The hardware-scaling demand sits on a plateau of the plan (12 workers at 142 QPS in seeds 1-3, where 145 gave
// 12-13 and 155 sits on a narrow step): the active-server count is a step function of the demand estimate, and at
// a step a live run and a simulation each land on either side by chance, which is a coin flip, not a measure of
// fidelity.
func TestFidelity(t *testing.T) {
	for _, tc := range []struct {
		pipeline string
		qps      float64
		// maxViolations, when positive, is the most SLO violations the live run may have (the camera's 30% and
		// 80% of its hardware-mode capacity, 90 QPS: issue 30's live check).
		maxViolations float64
	}{
		{"traffic", 142, 0},
		{"traffic", 450, 0},
		{"traffic-camera", 27, 0.01},
		{"traffic-camera", 72, 0.01},
		{"social", 84, 0.01},  // 30% of its hardware-mode capacity (280 QPS): parallel branches and a join
		{"social", 224, 0.01}, // 80%
	} {
		t.Run(fmt.Sprintf("%s/%gqps", tc.pipeline, tc.qps), func(t *testing.T) {
			fidelity(t, "../../examples/"+tc.pipeline+".yaml", tc.qps, tc.maxViolations)
		})
	}
}

func fidelity(t *testing.T, file string, qps, maxViolations float64) {
	const (
		servers = 20
		warmup  = 20 * time.Second
		measure = 40 * time.Second
	)
	spec, err := pipeline.Load(file)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sys, err := up.Start(ctx, up.Config{DataDir: t.TempDir(), Pipelines: []*pipeline.Spec{spec}, Workers: servers,
		Planner: planner.Config{Storage: jetstream.MemoryStorage}, MaxPayload: 8 << 20,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		sys.Wait()
	}()
	<-sys.Frontend.Ready()
	nc, err := sys.Connect("loadgen")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	// Sample the workers serving a variant once a second over the measured part.
	var mu sync.Mutex
	var samples []int
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		start := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if time.Since(start) < warmup {
					continue
				}
				n := 0
				for _, w := range sys.Workers {
					if w.Serving() != "" {
						n++
					}
				}
				mu.Lock()
				samples = append(samples, n)
				mu.Unlock()
			}
		}
	}()
	live, err := Run(ctx, nc, Config{Pipeline: spec.Name, QPS: qps, Duration: measure, Warmup: warmup,
		Grace: 5 * time.Second, InputShape: []int64{1, 4}, Seed: 1}, io.Discard)
	close(stop)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	liveServers := mean(samples)
	mu.Unlock()

	// The live run is one sample of a noisy process (near a re-plan, a few seconds decide a run's violations), so
	// it is compared with the mean of simulations over several seeds.
	var simd sim.Summary
	var viols []float64
	const seeds = 5
	for seed := uint64(1); seed <= seeds; seed++ {
		res, err := sim.Run(sim.Config{Spec: spec, Workload: workload.Constant(qps, warmup+measure), Warmup: warmup,
			Servers: servers, System: "loki", Seed: seed, CommLatency: -1})
		if err != nil {
			t.Fatal(err)
		}
		r := res.Summary
		simd.SLOViolationRatio += r.SLOViolationRatio / seeds
		simd.MeanAccuracy += r.MeanAccuracy / seeds
		simd.MeanActiveServers += r.MeanActiveServers / seeds
		simd.Requests += r.Requests
		viols = append(viols, r.SLOViolationRatio)
	}
	t.Logf("live:      SLO violations %.2f%%  accuracy %.4f  active servers %.2f  (%d sent, lost %d)",
		100*live.SLOViolationRatio, live.MeanAccuracy, liveServers, live.Sent, live.Lost)
	t.Logf("simulated: SLO violations %.2f%%  accuracy %.4f  active servers %.2f  (mean of %d seeds; violations %.2f%%-%.2f%%)",
		100*simd.SLOViolationRatio, simd.MeanAccuracy, simd.MeanActiveServers, seeds, 100*slices.Min(viols),
		100*slices.Max(viols))
	if live.Lost > 0 {
		t.Errorf("%d requests lost", live.Lost)
	}
	if maxViolations > 0 && live.SLOViolationRatio > maxViolations {
		t.Errorf("live SLO violations %.2f%%, over %.2g%%", 100*live.SLOViolationRatio, 100*maxViolations)
	}
	if d := math.Abs(live.MeanAccuracy-simd.MeanAccuracy) / simd.MeanAccuracy; d > 0.02 {
		t.Errorf("accuracy differs by %.1f%%", 100*d)
	}
	if d := math.Abs(live.SLOViolationRatio - simd.SLOViolationRatio); d > 0.02 {
		t.Errorf("SLO-violation ratio differs by %.1f points", 100*d)
	}
	// The active servers are a step function of the demand estimate, averaged over the run: where a demand sits
	// near a step (the camera's 27 QPS, between 13 and 14 workers), a few seconds on either side move the mean by
	// a few tenths of a worker, which 2% of 13 workers cannot tell from a fault. Half a worker is the least
	// difference held against the run.
	if d := math.Abs(liveServers - simd.MeanActiveServers); d > max(0.02*simd.MeanActiveServers, 0.5) {
		t.Errorf("active servers differ by %.2f (%.1f%%)", d, 100*d/simd.MeanActiveServers)
	}
}

func mean(v []int) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0
	for _, x := range v {
		s += x
	}
	return float64(s) / float64(len(v))
}
