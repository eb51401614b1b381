package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestCVMakesArrivalsBursty: with --cv 3 loadgen sends in bursts, as the simulator's Gamma arrivals do: the counts
// per 200 ms window of its send times vary about cv^2 = 9 times their mean (a renewal process's index of
// dispersion), where Poisson's (--cv 1) vary about as much as their mean. The send times are its schedule (Schedule,
// the same draws for a seed); the run checks that Run keeps to it: every request arrives, the middle half of them
// within 150 ms of each other's lag. (The dispersion measured where the requests arrive is the machine's as much as loadgen's: a
// loaded machine's stalls clumped Poisson arrivals to 143 once.)
func TestCVMakesArrivalsBursty(t *testing.T) {
	for _, cv := range []float64{1, 3} {
		cl := cmdLine{cfg: Config{Pipeline: "p", QPS: 100, Duration: 8 * time.Second, Grace: time.Second},
			shape: "64,192", cv: cv}
		cfg, err := cl.config()
		if err != nil {
			t.Fatal(err)
		}
		sched, err := Schedule(cfg)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Time{}
		times := make([]time.Time, len(sched))
		for i, d := range sched {
			times[i] = start.Add(d)
		}
		d := dispersion(times, 200*time.Millisecond)
		t.Logf("cv %v: %d sends, index of dispersion of their counts per 200 ms: %.2f", cv, len(sched), d)
		if (cv == 1 && (d < 0.5 || d > 2)) || (cv == 3 && d < 4) {
			t.Errorf("cv %v: index of dispersion %.2f, want about %v", cv, d, cv*cv)
		}
		if cv == 3 {
			keepsToSchedule(t, cfg, sched)
		}
	}
}

// keepsToSchedule runs cfg against a responder and checks that Run sends what Schedule says it does, when it does.
func keepsToSchedule(t *testing.T, cfg Config, sched []time.Duration) {
	t.Helper()
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
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	begun := time.Now()
	s, err := Run(context.Background(), nc, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if s.Sent != len(sched) || len(arrivals) != len(sched) {
		t.Fatalf("%d sent and %d arrived, the schedule has %d", s.Sent, len(arrivals), len(sched))
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	lags := make([]time.Duration, len(sched))
	for i, d := range sched {
		lags[i] = arrivals[i].Sub(begun) - d
	}
	// Their spread, not their level: Run's clock starts a little after begun. A loaded machine spread them by up to
	// 105 ms (load average 8, the race detector, 400 QPS); sent at a steady rate instead, they would spread by the
	// schedule's own wander from it, checked here to be several times the bound.
	spread := func(lags []time.Duration) time.Duration {
		slices.Sort(lags)
		return lags[3*len(lags)/4] - lags[len(lags)/4]
	}
	steady := make([]time.Duration, len(sched))
	for i, d := range sched {
		steady[i] = time.Duration(float64(i)/cfg.QPS*float64(time.Second)) - d
	}
	const bound = 150 * time.Millisecond
	got, want := spread(lags), spread(steady)
	t.Logf("the middle half of the requests' lags behind the schedule spread over %v (a steady sender's: %v)", got,
		want)
	if want < 3*bound {
		t.Fatalf("a steady sender's lags spread over %v only: the check cannot tell it from the schedule", want)
	}
	if got > bound {
		t.Errorf("the middle half of the requests' lags behind their scheduled times spread over %v, want %v at most",
			got, bound)
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
