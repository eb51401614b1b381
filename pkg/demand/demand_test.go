package demand

import (
	"math"
	"testing"
	"time"
)

func TestEstimator(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := time.Second
	e := New(0.5, 3*time.Second)
	e.Observe("f1", 100, sec, t0)
	e.Observe("f2", 50, sec, t0)
	if got := e.Tick(t0); got != 150 {
		t.Fatalf("first tick %v, want the total 150", got)
	}
	// Demand doubles on f1: the average moves half way per tick.
	e.Observe("f1", 250, sec, t0.Add(sec))
	e.Observe("f2", 50, sec, t0.Add(sec))
	if got := e.Tick(t0.Add(sec)); got != 225 {
		t.Fatalf("second tick %v, want 225", got)
	}
	// f2 goes silent: after 3 s it no longer counts.
	for i := 2; i <= 12; i++ {
		e.Observe("f1", 250, sec, t0.Add(time.Duration(i)*sec))
		e.Tick(t0.Add(time.Duration(i) * sec))
	}
	if got := e.Estimate(); math.Abs(got-250) > 1 {
		t.Fatalf("after f2 went silent the estimate is %v, want about 250", got)
	}
	// A report over a half-second interval is a rate.
	e2 := New(1, 0)
	e2.Observe("f", 10, 500*time.Millisecond, t0)
	if got := e2.Tick(t0); got != 20 {
		t.Fatalf("rate %v, want 20", got)
	}
}

func TestMoved(t *testing.T) {
	for _, tc := range []struct {
		prev, cur, th float64
		want          bool
	}{
		{100, 105, 0.1, false},
		{100, 111, 0.1, true},
		{100, 89, 0.1, true},
		{0, 0.5, 0.1, false}, // noise near zero
		{0, 3, 0.1, true},
	} {
		if got := Moved(tc.prev, tc.cur, tc.th); got != tc.want {
			t.Errorf("Moved(%v, %v, %v) = %v", tc.prev, tc.cur, tc.th, got)
		}
	}
}
