package sim

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestDegradeAnswersMoreThanReroute: at 1.2 times the traffic example's capacity, degrade serves in full what
// reroute serves (it routes the same), and answers with the detector's result many of the requests reroute
// answers partial or dropped: fewer requests go without an answer, and the degraded leaves (scored 0 for the
// classification they lack) lower the accuracy reported.
func TestDegradeAnswersMoreThanReroute(t *testing.T) {
	spec := traffic(t)
	run := func(system string) Summary {
		res, err := Run(Config{Spec: spec, Workload: workload.Constant(1330, 35*time.Second),
			Warmup: 15 * time.Second, Servers: 20, System: system, Seed: 1, CommLatency: -1})
		if err != nil {
			t.Fatal(err)
		}
		return res.Summary
	}
	reroute, degrade := run("loki:reroute"), run("loki:degrade")
	t.Logf("reroute %+v", reroute)
	t.Logf("degrade %+v", degrade)
	if degrade.OK != reroute.OK || reroute.Degraded != 0 {
		t.Errorf("ok: degrade %d, reroute %d (degraded %d): want the same requests served in full, none degraded "+
			"by reroute", degrade.OK, reroute.OK, reroute.Degraded)
	}
	if degrade.Degraded == 0 || degrade.Partial != 0 || degrade.UnansweredRatio >= reroute.UnansweredRatio-0.02 {
		t.Errorf("degrade: %d degraded, %d partial, %.1f%% unanswered; reroute %.1f%%: want degraded answers "+
			"in place of partial ones and at least 2 points fewer unanswered", degrade.Degraded, degrade.Partial,
			100*degrade.UnansweredRatio, 100*reroute.UnansweredRatio)
	}
	if degrade.MeanAccuracy >= reroute.MeanAccuracy {
		t.Errorf("accuracy: degrade %.4f, reroute %.4f: the degraded leaves should lower it", degrade.MeanAccuracy,
			reroute.MeanAccuracy)
	}
}
