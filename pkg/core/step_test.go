package core

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestStepForgetsTheGaps: the gaps the plan check replays are those of the load after a step of the demand, not
// the half minute before it (a step from 100 to 600 QPS: the check otherwise saw arrivals far burstier than either
// load, and tightened the plans after the step for nothing).
func TestStepForgetsTheGaps(t *testing.T) {
	now := time.Unix(0, 0)
	c := started(t, now, traffic(t))
	p := c.Pipelines()[0]
	report := func(qps int) (stepped bool) {
		gaps := make([]float32, min(qps, wire.MaxDemandGaps))
		for i := range gaps {
			gaps[i] = 1000 / float32(qps)
		}
		now = now.Add(time.Second)
		stepped, err := c.Report("traffic", wire.DemandReport{Frontend: "f", Count: qps, IntervalMs: 1000,
			GapsMs: gaps}, now)
		if err != nil {
			t.Fatal(err)
		}
		tickAndPublish(c, now, 20)
		return stepped
	}
	for range 20 {
		if report(100) {
			t.Fatal("a steady 100 QPS made a step")
		}
	}
	if !report(600) {
		t.Fatal("100 to 600 QPS made no step")
	}
	report(600)
	s := c.Traffic(p, now)
	if s == nil || len(s.Gaps) != 1 {
		t.Fatalf("sample %+v: want one frontend's gaps", s)
	}
	for _, g := range s.Gaps[0] {
		if want := time.Second / 600; g > want+time.Millisecond/10 {
			t.Fatalf("a gap of %v after the step to 600 QPS (want %v): the gaps before it were kept", g, want)
		}
	}
}
