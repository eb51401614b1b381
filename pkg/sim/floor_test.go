package sim

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestAccuracyFloor: the traffic example with min_accuracy 0.40 on 20 servers. At 300 QPS the floor holds on fewer
// servers than the plans without it (which keep the most accurate variants); at 700 QPS, more than the servers
// serve at the floor, the plans serve what they can at it and the frontends' admission control refuses the rest:
// the answers stay at the floor and in time.
func TestAccuracyFloor(t *testing.T) {
	run := func(qps, floor float64, admit bool) Summary {
		t.Helper()
		spec := traffic(t)
		spec.MinAccuracy = floor
		res, err := Run(Config{Spec: spec, Workload: workload.Constant(qps, 40*time.Second), Servers: 20, Seed: 1,
			CommLatency: -1, Warmup: 15 * time.Second, Admit: admit})
		if err != nil {
			t.Fatal(err)
		}
		return res.Summary
	}
	plain, floored := run(300, 0, true), run(300, 0.40, true)
	t.Logf("300 QPS: accuracy %.4f on %.1f servers without the floor, %.4f on %.1f with it", plain.MeanAccuracy,
		plain.MeanActiveServers, floored.MeanAccuracy, floored.MeanActiveServers)
	if floored.MeanAccuracy < 0.40 || floored.MeanActiveServers >= plain.MeanActiveServers ||
		floored.SLOViolationRatio > 0.01 {
		t.Errorf("300 QPS at the floor: accuracy %.4f on %.1f servers, %.2f%% violated; want >= 0.40 on fewer than "+
			"%.1f, under 1%%", floored.MeanAccuracy, floored.MeanActiveServers, 100*floored.SLOViolationRatio,
			plain.MeanActiveServers)
	}
	over := run(700, 0.40, true)
	refused := float64(over.Refused) / float64(over.Requests)
	t.Logf("700 QPS: accuracy %.4f, %.1f%% refused, %.2f%% of the admitted violated", over.MeanAccuracy, 100*refused,
		100*over.AcceptedViolationRatio)
	if over.MeanAccuracy < 0.40 || refused < 0.1 || refused > 0.5 || over.AcceptedViolationRatio > 0.01 {
		t.Errorf("700 QPS at the floor: accuracy %.4f, %.1f%% refused, %.2f%% of the admitted violated; want >= "+
			"0.40, a share refused, under 1%%", over.MeanAccuracy, 100*refused, 100*over.AcceptedViolationRatio)
	}
}
