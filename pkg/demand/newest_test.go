package demand

import (
	"math"
	"testing"
	"time"
)

// following is an estimator that takes steps, its estimate at qps.
func following(qps float64) *Estimator {
	e := New(0.3, 0)
	e.FollowSteps()
	e.Seed(qps)
	return e
}

// poisson is the dispersion of Poisson arrivals.
func poisson() float64 { return 1 }

// gapsAt is n gaps of arrivals at qps, in milliseconds.
func gapsAt(n int, qps float64) []float32 {
	g := make([]float32, n)
	for i := range g {
		g[i] = float32(1000 / qps)
	}
	return g
}

// TestStepTakenAtTheNewestRate: half a second after a step from 100 to 600 QPS, a report's interval holds 310 a
// second, its newest 128 arrivals 600. The step is taken at their rate (one standard deviation high) where they are
// that far above the interval's for arrivals of their dispersion, and at the interval's otherwise.
func TestStepTakenAtTheNewestRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cases := []struct {
		name       string
		gaps       []float32
		dispersion float64
		maxRate    float64
		want       float64
	}{
		{"Poisson arrivals", gapsAt(128, 600), 1, 0, 127 / (128 / 600.0) * (1 + math.Sqrt(1.0/128))},
		{"bursty arrivals (CV 4): their newest gaps are a burst's", gapsAt(128, 600), 16, 0, 310},
		{"dispersion 1.5: 360 is within their noise", gapsAt(128, 360), 1.5, 0, 310},
		{"dispersion not known yet", gapsAt(128, 600), math.NaN(), 0, 310},
		{"too few gaps", gapsAt(MinNewestGaps-1, 600), 1, 0, 310},
		{"newest no faster than 2 sigma above the interval", gapsAt(128, 350), 1, 0, 310},
		{"capped at MaxRate", gapsAt(128, 6000), 1, 1000, 1000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := following(100)
			e.MaxRate = c.maxRate
			if err := e.Observe("f", 310, time.Second, t0); err != nil {
				t.Fatal(err)
			}
			e.Newest("f", c.gaps, func() float64 { return c.dispersion })
			if !e.Stepped(t0) {
				t.Fatal("310 at 100 QPS not said to be a step")
			}
			if got := e.Tick(t0); math.Abs(got-c.want) > 1e-4*c.want { // gaps are float32s
				t.Fatalf("estimate %v, want %v", got, c.want)
			}
		})
	}
}

// TestNewestOnlyInAStep: newest arrivals faster than the interval move nothing unless the interval's total is a
// step (a steady load's noise in 128 gaps is not a rise), and a later report without them forgets them.
func TestNewestOnlyInAStep(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := following(600)
	e.Observe("f", 600, time.Second, t0)
	e.Newest("f", gapsAt(128, 1200), poisson)
	if got := e.Tick(t0); got != 600 {
		t.Fatalf("a steady second at 600 with fast newest gaps: %v, want 600", got)
	}
	// The dispersion reads thousands of gaps: not for newest gaps no faster than their interval.
	e.Observe("f", 600, time.Second, t0)
	e.Newest("f", gapsAt(128, 600), func() float64 {
		t.Fatal("dispersion read for gaps at the interval's rate")
		return 1
	})
	e.Observe("f", 1000, time.Second, t0.Add(time.Second)) // a step, its report without gaps
	if got := e.Tick(t0.Add(time.Second)); got != 1000 {
		t.Fatalf("a step without gaps: %v, want the interval's 1000", got)
	}
}

// TestNewestRateProvisional: a step taken at the newest arrivals' rate holds until every frontend has reported
// since, and the first tick after is their total, whatever the thresholds (a step, a shift or the average would
// leave an estimate too low where the newest arrivals told the rate low).
func TestNewestRateProvisional(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := following(100)
	e.Observe("a", 10, time.Second, t0.Add(-300*time.Millisecond)) // a second frontend, at 10 QPS
	e.Observe("f", 300, time.Second, t0)
	e.Newest("f", gapsAt(128, 450), poisson)
	got := e.Tick(t0.Add(-time.Millisecond)) // a tick stamped before the report that made its step arrived
	if !e.Provisional() || got < 450 {
		t.Fatalf("after the step: %v, provisional %v; want at least 450, provisional", got, e.Provisional())
	}
	if again := e.Tick(t0.Add(time.Millisecond)); again != got || !e.Provisional() {
		t.Fatalf("at the next tick, before another report: %v, want %v held", again, got)
	}
	e.Observe("f", 600, time.Second, t0.Add(time.Second))
	if again := e.Tick(t0.Add(time.Second)); again != got || !e.Provisional() {
		t.Fatalf("before frontend a reported again: %v, want %v held", again, got)
	}
	e.Observe("a", 10, time.Second, t0.Add(1300*time.Millisecond))
	if total := e.Tick(t0.Add(1300 * time.Millisecond)); total != 610 || e.Provisional() {
		t.Fatalf("once both reported: %v (provisional %v), want their total 610", total, e.Provisional())
	}
	e.Observe("f", 700, time.Second, t0.Add(2*time.Second))
	e.Observe("a", 10, time.Second, t0.Add(2*time.Second))
	if avg := e.Tick(t0.Add(2 * time.Second)); math.Abs(avg-(0.3*710+0.7*610)) > 1e-9 {
		t.Fatalf("after: %v, want the average again", avg)
	}
}

// TestProvisionalFromTheReportNotTheTick: the planner's tick may be stamped before the report that made its step
// arrived; that report is not the next one, which replaces the provisional estimate.
func TestProvisionalFromTheReportNotTheTick(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := following(100)
	e.Observe("f", 100, time.Second, t0.Add(-time.Second))
	e.Observe("f", 310, time.Second, t0)
	e.Newest("f", gapsAt(128, 600), poisson)
	got := e.Tick(t0.Add(-time.Millisecond))
	if !e.Provisional() {
		t.Fatalf("step not taken at the newest arrivals' rate: %v", got)
	}
	if e.Stepped(t0.Add(time.Millisecond)) {
		t.Fatal("said to replace the provisional estimate before the next report")
	}
	if again := e.Tick(t0.Add(time.Millisecond)); again != got {
		t.Fatalf("at the next tick, before another report: %v, want %v held", again, got)
	}
}
