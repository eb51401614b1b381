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
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/sim"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
	"github.com/sleipnir-serving/sleipnir/services/planner"
	"github.com/sleipnir-serving/sleipnir/services/up"
)

// TestFidelity runs a constant demand on the live system (embedded NATS, planner, frontend, 20 emulated workers,
// this load generator) and in the simulator (the mean of five seeds), and compares the mean accuracy (within 2%),
// the SLO-violation ratio (within 2 points), the mean active servers and, on a priced cluster, their mean cost per
// hour (each within 5%, and the servers within half a worker) over the measured part.
//
// Both run the same arrivals: the simulator replays the times the load generator sends at (Schedule). The plan is a
// step function of the demand estimate, which its hysteresis holds on the high side of the noise, so two draws of
// the same rate plan apart: at the camera's 27 QPS, the load generator's seed 1 sends 29.5 QPS over the 20 s of
// warmup, and simulations of those arrivals ran 14.0-14.8 servers where independent Poisson draws ran 13.7.
//
// On the traffic example 130 QPS is served by hardware scaling on 12 workers, 450 by accuracy scaling on all 20;
// the traffic camera's 27 and 72 QPS are 30% and 80% of its hardware-mode capacity (90 QPS), where the live run
// must also miss under 1% of its deadlines; and so are the social-media example's 84 and 224 QPS (280 QPS). The
// classed traffic example runs on 12 cpu and 4 fast workers, priced, at 200 QPS (9 of them, 5.70 an hour).
//
// The hardware-scaling demand sits on a plateau of the plan for the arrivals sent: seed 1's estimate swings 10%
// either side of its rate, and at 142 QPS a re-plan at its high point bought a 13th worker in four of the five
// simulated phases and in none of the live run's (12.95 against 12.00), while at 130 QPS the phases ran 11.8-12.0.
// At a step, a live run and a simulation each land on either side by chance, which is a coin flip, not a measure
// of fidelity.
func TestFidelity(t *testing.T) {
	for _, tc := range []struct {
		pipeline string
		qps      float64
		// maxViolations, when positive, is the most SLO violations the live run may have (the camera's 30% and
		// 80% of its hardware-mode capacity, 90 QPS: issue 30's live check).
		maxViolations float64
		// classes and prices, when set, are the workers per server class and their hourly prices (else 20
		// workers of the default class, unpriced).
		classes map[string]int
		prices  plan.Prices
	}{
		{pipeline: "traffic", qps: 130},
		{pipeline: "traffic", qps: 450},
		{pipeline: "traffic-camera", qps: 27, maxViolations: 0.01},
		{pipeline: "traffic-camera", qps: 72, maxViolations: 0.01},
		{pipeline: "social", qps: 84, maxViolations: 0.01},  // 30% of its hardware-mode capacity (280 QPS): parallel branches and a join
		{pipeline: "social", qps: 224, maxViolations: 0.01}, // 80%
		{pipeline: "traffic-classes", qps: 200, classes: map[string]int{"cpu": 12, "fast": 4},
			prices: plan.Prices{"cpu": 0.4, "fast": 2.5}},
	} {
		t.Run(fmt.Sprintf("%s/%gqps", tc.pipeline, tc.qps), func(t *testing.T) {
			fidelity(t, "../../examples/"+tc.pipeline+".yaml", tc.qps, tc.maxViolations, tc.classes, tc.prices)
		})
	}
}

func fidelity(t *testing.T, file string, qps, maxViolations float64, classes map[string]int, prices plan.Prices) {
	const (
		servers = 20
		warmup  = 20 * time.Second
		measure = 40 * time.Second
	)
	spec, err := pipeline.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	cluster := plan.Uniform(servers)
	if classes != nil {
		cluster = plan.NewCluster(classes, prices)
	}
	load := Config{Pipeline: spec.Name, QPS: qps, Duration: measure, Warmup: warmup, Grace: 5 * time.Second,
		InputShape: []int64{1, 4}, Seed: 1}
	times, err := Schedule(load)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sys, err := up.Start(ctx, up.Config{DataDir: t.TempDir(), Pipelines: []*pipeline.Spec{spec}, Workers: servers,
		WorkerClasses: classes, Planner: planner.Config{Storage: jetstream.MemoryStorage, Prices: prices},
		MaxPayload: 8 << 20, Logger: fidelityLogger(t)})
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

	// Sample the workers serving a variant, and what they cost, once a second over the measured part.
	var mu sync.Mutex
	var samples, costs []float64
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
				n, cost := 0, 0.0
				for _, w := range sys.Workers {
					if w.Serving() != "" {
						n++
						cost += cluster.Price(w.Class())
					}
				}
				mu.Lock()
				samples, costs = append(samples, float64(n)), append(costs, cost)
				mu.Unlock()
			}
		}
	}()
	live, err := Run(ctx, nc, load, io.Discard)
	close(stop)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	liveServers, liveCost := mean(samples), mean(costs)
	mu.Unlock()

	// The live run is one sample of a noisy process (near a re-plan, a few seconds decide a run's violations), so
	// it is compared with the mean of simulations over several seeds, each of the arrivals sent live. Each seed
	// runs them at another phase of the planner's one-second tick (0, 0.2, ... 0.8 s later), since the live run's
	// phase, where its frontend's reports fall among the arrivals, is anyone's.
	var simd sim.Summary
	var viols []float64
	const seeds = 5
	for seed := uint64(1); seed <= seeds; seed++ {
		work := replay(times, time.Duration(seed-1)*time.Second/seeds, warmup+measure)
		res, err := sim.Run(sim.Config{Spec: spec, Workload: work, Warmup: warmup, Cluster: cluster, System: "loki",
			Seed: seed, CommLatency: -1})
		if err != nil {
			t.Fatal(err)
		}
		r := res.Summary
		simd.SLOViolationRatio += r.SLOViolationRatio / seeds
		simd.MeanAccuracy += r.MeanAccuracy / seeds
		simd.MeanActiveServers += r.MeanActiveServers / seeds
		simd.MeanCostPerHour += r.MeanCostPerHour / seeds
		simd.Requests += r.Requests
		viols = append(viols, r.SLOViolationRatio)
	}
	t.Logf("live:      SLO violations %.2f%%  accuracy %.4f  active servers %.2f  cost %.3f/h  (%d sent, lost %d)",
		100*live.SLOViolationRatio, live.MeanAccuracy, liveServers, liveCost, live.Sent, live.Lost)
	t.Logf("simulated: SLO violations %.2f%%  accuracy %.4f  active servers %.2f  cost %.3f/h  (mean of %d seeds; violations %.2f%%-%.2f%%)",
		100*simd.SLOViolationRatio, simd.MeanAccuracy, simd.MeanActiveServers, simd.MeanCostPerHour, seeds,
		100*slices.Min(viols), 100*slices.Max(viols))
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
	// Issue 52: what the live system runs is what the simulated plans run, within 5%; and the servers within half
	// a worker, since 5% of 20 workers would pass a whole worker more.
	if d := math.Abs(liveServers - simd.MeanActiveServers); d > min(0.05*simd.MeanActiveServers, 0.5) {
		t.Errorf("active servers differ by %.2f (%.1f%%)", d, 100*d/simd.MeanActiveServers)
	}
	if d := math.Abs(liveCost - simd.MeanCostPerHour); cluster.Priced() && d > 0.05*simd.MeanCostPerHour {
		t.Errorf("cost per hour differs by %.3f (%.1f%%)", d, 100*d/simd.MeanCostPerHour)
	}
}

// replay is a workload of the arrivals at times, each offset later, d long: the simulator's run of what the load
// generator sent.
func replay(times []time.Duration, offset, d time.Duration) *workload.Workload {
	counts := make([]float64, int((d+time.Second-1)/time.Second))
	var at []time.Duration
	for _, t := range times {
		if t += offset; t < d {
			at = append(at, t)
			counts[t/time.Second]++
		}
	}
	return &workload.Workload{Name: "the load generator's arrivals", Step: time.Second, Rates: counts, Times: at}
}

// fidelityLogger discards the system's logs, or, with FIDELITY_LOG=FILE, appends them to FILE as JSON lines (each
// plan published says its demand estimate, arrival dispersion and active servers).
func fidelityLogger(t *testing.T) *slog.Logger {
	path := os.Getenv("FIDELITY_LOG")
	if path == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return slog.New(slog.NewJSONHandler(f, nil)).With("test", t.Name())
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}
