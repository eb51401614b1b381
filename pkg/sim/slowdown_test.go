package sim

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

func TestParseSlowdowns(t *testing.T) {
	ds, err := ParseSlowdowns("2@30s, 0-4=3@1m,7=0.5@0s,all=1@2m")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		srv  int
		at   time.Duration
		want float64
	}{{0, 0, 1}, {7, 0, 0.5}, {7, 31 * time.Second, 2}, {3, 31 * time.Second, 2}, {3, time.Minute, 3},
		{5, time.Minute, 2}, {4, 2 * time.Minute, 1}} {
		if got := slowdownAt(ds, c.srv, c.at); got != c.want {
			t.Errorf("worker %d at %v: scale %v, want %v", c.srv, c.at, got, c.want)
		}
	}
	for _, bad := range []string{"2", "x@1s", "0@1s", "2@-1s", "2@soon", "4-2=2@1s", "a=2@1s", "-1=2@1s"} {
		if _, err := ParseSlowdowns(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if ds, err := ParseSlowdowns(""); err != nil || ds != nil {
		t.Fatalf("empty: %v, %v", ds, err)
	}
}

// TestSlowdownAdapts: every worker runs twice as slow from 30 s on, at a demand the cluster serves at that speed
// on more servers. With the measured latencies the planner plans for what the workers really do (more servers),
// and the violations fall back within 30 s (seeds 1-3: 0% from 60 s on); with the profiles alone
// it keeps the plan that no longer holds, and most requests miss (85-88%).
func TestSlowdownAdapts(t *testing.T) {
	spec := traffic(t)
	slow, err := ParseSlowdowns("2@30s")
	if err != nil {
		t.Fatal(err)
	}
	run := func(seed uint64, profilesOnly bool) (violations float64, before, after int) {
		res, err := Run(Config{Spec: spec, Workload: workload.Constant(100, 90*time.Second), Servers: 20, Seed: seed,
			CommLatency: -1, Slowdown: slow, Control: control.Config{ProfilesOnly: profilesOnly}})
		if err != nil {
			t.Fatal(err)
		}
		t1 := tallySeconds(res.Seconds[60:])
		return t1.violationRatio(), res.Seconds[29].ActiveServers, t1.maxServers
	}
	var sum float64
	for seed := uint64(1); seed <= 3; seed++ {
		v, before, after := run(seed, false)
		sum += v
		t.Logf("seed %d, measured latencies: %.2f%% violations from 60 s on; %d servers before the slowdown, up "+
			"to %d after", seed, 100*v, before, after)
		if after <= before {
			t.Errorf("seed %d: servers %d -> %d: want more after the slowdown", seed, before, after)
		}
		v, _, _ = run(seed, true)
		t.Logf("seed %d, profiles alone: %.2f%% violations from 60 s on", seed, 100*v)
		if v < 0.5 {
			t.Errorf("seed %d, with the profiles alone: %.2f%% violations from 60 s on: want most (the scenario "+
				"tests nothing)", seed, 100*v)
		}
	}
	if mean := sum / 3; mean > 0.01 {
		t.Errorf("with the measured latencies: %.2f%% violations from 60 s on, over seeds 1-3: want under 1%%",
			100*mean)
	}
}
