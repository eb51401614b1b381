package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestCVMakesArrivalsBursty: with --cv 3 the requests come in bursts, as the simulator's Gamma arrivals do: the
// counts per 200 ms window vary about cv^2 = 9 times their mean (a renewal process's index of dispersion), where
// Poisson arrivals (--cv 1) vary about as much as their mean. Measured where the requests arrive, so a busy
// machine's stalls clump both; the bound is relative (pkg/workload checks the draws themselves).
func TestCVMakesArrivalsBursty(t *testing.T) {
	var poisson float64
	for _, cv := range []float64{1, 3} {
		nc := connect(t)
		var mu sync.Mutex
		var arrivals []time.Time
		ok, _ := msgpack.Marshal(&wire.InferReply{RequestID: "x", Pipeline: "p", Status: wire.StatusOK})
		if _, err := nc.Subscribe(wire.InferSubject("p"), func(m *nats.Msg) {
			mu.Lock()
			arrivals = append(arrivals, time.Now())
			mu.Unlock()
			m.Respond(ok)
		}); err != nil {
			t.Fatal(err)
		}
		cl := cmdLine{cfg: Config{Pipeline: "p", QPS: 400, Duration: 8 * time.Second, Grace: time.Second},
			shape: "64,192", cv: cv}
		cfg, err := cl.config()
		if err != nil {
			t.Fatal(err)
		}
		s, err := Run(context.Background(), nc, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		d := dispersion(arrivals, 200*time.Millisecond)
		mu.Unlock()
		t.Logf("cv %v: %d sent, index of dispersion of the counts per 200 ms: %.2f", cv, s.Sent, d)
		if cv == 1 {
			poisson = d
		} else if d < 4 || d < 1.5*poisson {
			// A busy machine's stalls raised Poisson's to 3.7 once (CPU-bound tests beside it); Gamma's is about 9
			// plus as much.
			t.Errorf("cv %v: index of dispersion %.2f, Poisson's %.2f: want at least 4 and 1.5 times Poisson's", cv,
				d, poisson)
		}
	}
}

// dispersion is the variance over the mean of the arrivals' counts per window.
func dispersion(arrivals []time.Time, window time.Duration) float64 {
	if len(arrivals) == 0 {
		return 0
	}
	start := arrivals[0]
	counts := make([]float64, int(arrivals[len(arrivals)-1].Sub(start)/window)+1)
	for _, a := range arrivals {
		counts[int(a.Sub(start)/window)]++
	}
	mean, sq := 0.0, 0.0
	for _, n := range counts {
		mean += n
	}
	mean /= float64(len(counts))
	for _, n := range counts {
		sq += (n - mean) * (n - mean)
	}
	return sq / float64(len(counts)-1) / mean
}

func TestCVErrors(t *testing.T) {
	for _, cl := range []cmdLine{
		{cfg: Config{Pipeline: "p", QPS: 10, Duration: time.Second}, shape: "64,192", cv: -1},
		{cfg: Config{Pipeline: "p", QPS: 10, Duration: time.Second}, shape: "64,192", cv: 2, steps: "10:1s"},
		{cfg: Config{Pipeline: "p"}, shape: "64,192", cv: -2, workload: "constant:10:1s"},
	} {
		if _, err := cl.config(); err == nil {
			t.Errorf("%+v: no error", cl)
		}
	}
}
