package admission

import (
	"testing"
	"time"
)

// TestBoundSteersItsTail: a pipeline at twice what it answers whose answers spread over two thirds of the deadline
// (a request's batch, and the later batches it waits for). At the fixed share nearly 3% of the requests admitted are
// late; steered, under 1%, and no fewer answered in time.
func TestBoundSteersItsTail(t *testing.T) {
	inTime, late := map[bool]int{}, map[bool]int{}
	for _, steered := range []bool{false, true} {
		cfg := Config{}
		if !steered {
			cfg.MinLimitShare = DefaultLimitShare
		}
		g := New(cfg)
		q := &fifo{rate: 100, floor: 100 * time.Millisecond, deadline: 600 * time.Millisecond,
			spread: 390 * time.Millisecond}
		run(g, q, 200, []int{0}, t0, t0.Add(5*time.Second), t0, nil)
		q.inTime, q.late = 0, 0
		run(g, q, 200, []int{0}, t0.Add(5*time.Second), t0.Add(65*time.Second), t0, nil)
		inTime[steered], late[steered] = q.inTime, q.late
		t.Logf("steered %v: %d in time, %d late or dropped; share %.3f", steered, q.inTime, q.late,
			g.pipes["p"].share)
	}
	share := func(steered bool) float64 {
		return float64(late[steered]) / float64(inTime[steered]+late[steered])
	}
	if share(false) < 0.02 {
		t.Fatalf("the fixed share: %.2f%% late, want at least 2%% (the case shows nothing)", 100*share(false))
	}
	if share(true) > 0.01 || inTime[true] < inTime[false] {
		t.Errorf("steered: %.2f%% late (want under 1%%), %d in time (want at least the fixed share's %d)",
			100*share(true), inTime[true], inTime[false])
	}
}

// TestBoundSteersOnItsOwnAnswers: the late answers to requests admitted before the pipeline was congested (a cold
// start's) leave the bound's share alone; those admitted under the bound take from it.
func TestBoundSteersOnItsOwnAnswers(t *testing.T) {
	g := New(Config{})
	for i := range 200 {
		at := t0.Add(time.Duration(i) * 5 * time.Millisecond)
		g.Decide(Request{Pipeline: "p", Now: at, Deadline: at.Add(time.Second)}, Plan{Hosted: true, Overloaded: true})
	}
	answered := t0.Add(time.Second)
	for range 10 {
		g.Done("p", t0, answered, Late)
	}
	s := g.pipes["p"]
	if !s.congested || s.share != DefaultLimitShare {
		t.Fatalf("after 10 late answers to requests admitted before: congested %v, share %v; want congested at %v",
			s.congested, s.share, DefaultLimitShare)
	}
	g.Done("p", answered, answered.Add(500*time.Millisecond), Late)
	if want := DefaultLimitShare - shareStep; !near(s.share, want, 1e-12) {
		t.Errorf("a late answer to a request admitted under the bound: share %v, want %v", s.share, want)
	}
}

// TestBoundSteersOnlyWhenOverloaded: a violation takes from the share while the plan in force is overloaded and the
// arrivals are beyond what the pipeline answers; not at a load it answers, nor beyond it under a plan that serves
// the demand (a slowdown the planner plans for next: its latency's violations, which a smaller share only starves).
func TestBoundSteersOnlyWhenOverloaded(t *testing.T) {
	g := New(Config{})
	now := t0.Add(time.Minute)
	s := &pipeState{share: DefaultLimitShare, overloaded: true}
	s.served.start = t0
	s.served.add(now, DefaultRateWindow.Seconds(), 50)   // 100 a second answered
	s.arrivals[0].add(now, DefaultWindow.Seconds(), 200) // 100 a second arriving
	g.steer(s, now, false)
	if s.share != DefaultLimitShare {
		t.Errorf("at the load it answers: share %v after a violation, want %v", s.share, DefaultLimitShare)
	}
	s.arrivals[0].add(now, DefaultWindow.Seconds(), 200) // 200 a second
	s.overloaded = false
	g.steer(s, now, false)
	if s.share != DefaultLimitShare {
		t.Errorf("at twice the load it answers, under a plan that serves it: share %v after a violation, want %v",
			s.share, DefaultLimitShare)
	}
	s.overloaded = true
	g.steer(s, now, false)
	if want := DefaultLimitShare - shareStep; !near(s.share, want, 1e-12) {
		t.Errorf("at twice the load it answers: share %v after a violation, want %v", s.share, want)
	}
	for range 1000 {
		g.steer(s, now, false)
	}
	if s.share != DefaultMinShare {
		t.Errorf("after 1,000 violations: share %v, want the least, %v", s.share, DefaultMinShare)
	}
}

// TestBoundNotUnderTheFill: a share steered down bounds the time in the system no lower than the pipeline's fill
// (under it the bound starves the pipeline), nor the fill above the share it starts at.
func TestBoundNotUnderTheFill(t *testing.T) {
	g := New(Config{})
	s := &pipeState{share: 0.6}
	left := 600 * time.Millisecond
	for _, c := range []struct{ fillMs, want float64 }{{100, 0.36}, {375, 0.375}, {500, 0.39}} {
		if got := g.bound(s, left, Plan{CeilingFillMs: c.fillMs}); !near(got, c.want, 1e-9) {
			t.Errorf("fill %v ms: bound %v s, want %v", c.fillMs, got, c.want)
		}
	}
}
