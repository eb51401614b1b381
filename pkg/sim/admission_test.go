package sim

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// Admission control (pkg/admission) run by the simulator's frontends, against the same runs without it: safe to
// leave on at the loads the cluster serves, and holding what it admits in time at twice its capacity.

// admissionRun is a scenario's seconds [from, to) of seed's run with admission control and without.
func admissionRun(t *testing.T, spec *pipeline.Spec, w *workload.Workload, slow []Slowdown, seed uint64, from, to int) (on, off tally) {
	t.Helper()
	for _, admit := range []bool{true, false} {
		res, err := Run(Config{Spec: spec, Workload: w, Servers: 20, Seed: seed, CommLatency: -1, Slowdown: slow,
			Admit: admit})
		if err != nil {
			t.Fatal(err)
		}
		if admit {
			on = tallySeconds(res.Seconds[from:to])
		} else {
			off = tallySeconds(res.Seconds[from:to])
		}
	}
	return on, off
}

// TestAdmissionAtServedLoads: a cold start and a step within capacity (TestColdStart's and TestStep's windows),
// seeds 1-3: admission control refuses under 0.5% of the requests and adds under 0.2 points to the share of the
// admitted requests not answered ok (the runs differ once a request is refused, so a seed alone may go either way:
// the mean over the seeds is what is bounded). It refuses only while the answers show violations, which a load the
// cluster serves does not produce past its first second.
func TestAdmissionAtServedLoads(t *testing.T) {
	for _, tc := range []struct {
		name     string
		w        string
		from, to int
	}{
		{"cold start", "0.1:5s,200:15s", 5, 20},
		{"step", "100:30s,600:30s", 32, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var refused, added float64
			for seed := uint64(1); seed <= 3; seed++ {
				on, off := admissionRun(t, traffic(t), steps(t, tc.w), nil, seed, tc.from, tc.to)
				r := float64(on.refused) / float64(on.arrivals)
				t.Logf("seed %d: %.2f%% refused; %.2f%% of the admitted violated, %.2f%% without admission control",
					seed, 100*r, 100*on.acceptedViolationRatio(), 100*off.violationRatio())
				refused += r / 3
				added += (on.acceptedViolationRatio() - off.violationRatio()) / 3
			}
			if refused >= 0.005 || added >= 0.002 {
				t.Errorf("seeds 1-3: %.2f%% refused (want under 0.5%%), %+.2f points of violations (want under 0.2)",
					100*refused, 100*added)
			}
		})
	}
}

// TestAdmissionAtASlowedServer: every worker twice as slow from 30 s on (TestSlowdownAdapts), from 60 s on, seeds
// 1-3: the target of TestAdmissionAtServedLoads. The congestion of the slowdown refuses requests until the planner
// has re-planned on what the workers measure; it learns that from the batch sizes they still run once the bound has
// shortened their queues (pkg/latency's Window reports the others at least as slow), so the plan grows nearly as
// fast as without admission control, and the refusals end within seconds of the slowdown (docs/admission.md).
func TestAdmissionAtASlowedServer(t *testing.T) {
	slow, err := ParseSlowdowns("2@30s")
	if err != nil {
		t.Fatal(err)
	}
	var refused, added float64
	for seed := uint64(1); seed <= 3; seed++ {
		on, off := admissionRun(t, traffic(t), workload.Constant(100, 90*time.Second), slow, seed, 60, 90)
		r := float64(on.refused) / float64(on.arrivals)
		t.Logf("seed %d: %.2f%% refused; %.2f%% of the admitted violated, %.2f%% without admission control", seed,
			100*r, 100*on.acceptedViolationRatio(), 100*off.violationRatio())
		refused += r / 3
		added += (on.acceptedViolationRatio() - off.violationRatio()) / 3
	}
	if refused >= 0.005 || added >= 0.002 {
		t.Errorf("seeds 1-3: %.2f%% refused (want under 0.5%%), %+.2f points of violations (want under 0.2)",
			100*refused, 100*added)
	}
}

// TestAdmissionAtTwiceTheCapacity: the traffic example at 2,200 QPS on 20 workers, twice the 1,100 it serves
// without admission control (Capacity, seed 1, 2% precision), 40 s after a 20 s warmup, seeds 1-2: at least 95% of
// the capacity answered ok a second, under 1% of the admitted requests not ok. Without it, most requests miss.
func TestAdmissionAtTwiceTheCapacity(t *testing.T) {
	const capacity = 1100
	for seed := uint64(1); seed <= 2; seed++ {
		on, off := admissionRun(t, traffic(t), workload.Constant(2*capacity, time.Minute), nil, seed, 20, 60)
		okPerSecond := float64(on.ok) / float64(on.n)
		t.Logf("seed %d: %.0f ok a second, %.2f%% refused, %.2f%% of the admitted violated; without admission "+
			"control %.0f ok a second, %.1f%% violated", seed, okPerSecond, 100*float64(on.refused)/float64(on.arrivals),
			100*on.acceptedViolationRatio(), float64(off.ok)/float64(off.n), 100*off.violationRatio())
		if okPerSecond < 0.95*capacity || on.acceptedViolationRatio() >= 0.01 {
			t.Errorf("seed %d: %.0f ok a second (want at least %.0f), %.2f%% of the admitted violated (want under 1%%)",
				seed, okPerSecond, 0.95*capacity, 100*on.acceptedViolationRatio())
		}
	}
}
