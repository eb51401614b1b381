package workload

import (
	"math"
	"testing"
	"time"
)

// gapsCV is the mean rate and the coefficient of variation of the gaps between w's arrivals in [from, to).
func gapsCV(w *Workload, seed uint64, from, to time.Duration) (rate, cv float64) {
	a := w.Arrivals(seed)
	var prev time.Duration
	var n int
	var sum, sum2 float64
	for {
		at, ok := a.Next()
		if !ok || at >= to {
			break
		}
		if at >= from && prev >= from {
			g := (at - prev).Seconds()
			sum, sum2, n = sum+g, sum2+g*g, n+1
		}
		prev = at
	}
	mean := sum / float64(n)
	return 1 / mean, math.Sqrt(sum2/float64(n)-mean*mean) / mean
}

// TestRampAndParts: a ramp moves linearly; parts follow one another, each at its own burstiness: 200 QPS at CV 1
// for 200 s, then at CV 4, measured on the gaps of each half.
func TestRampAndParts(t *testing.T) {
	w, err := Parse("constant:150:10s+ramp:150:250:10s+constant:250:5s", 1)
	if err != nil {
		t.Fatal(err)
	}
	if w.Duration() != 25*time.Second || w.RateAt(0) != 150 || w.RateAt(10*time.Second) != 155 ||
		w.RateAt(19*time.Second) != 245 || w.RateAt(24*time.Second) != 250 || w.CVs != nil {
		t.Fatalf("%s: %v", w.Name, w.Rates)
	}
	w, err = Parse("constant:200:200s+constant:200:200s:cv=4", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		from, to time.Duration
		cv       float64
	}{{0, 200 * time.Second, 1}, {200 * time.Second, 400 * time.Second, 4}} {
		rate, cv := gapsCV(w, 3, c.from, c.to)
		if math.Abs(rate-200)/200 > 0.1 || math.Abs(cv-c.cv)/c.cv > 0.1 {
			t.Errorf("%v-%v: %.1f QPS at CV %.2f, want 200 at %g", c.from, c.to, rate, cv, c.cv)
		}
	}
	if w, err = Parse("constant:100:10s:cv=2", 1); err != nil || w.CV != 2 {
		t.Errorf("one part's cv: %v, %v", w, err)
	}
	for _, bad := range []string{"ramp:1:2", "ramp:-1:2:10s", "ramp:1:2:0s", "constant:1:1s+", "constant:1:1s:cv=0",
		"constant:1:1s:cv=x", "constant:1:1500ms+constant:1:1s"} {
		if _, err := Parse(bad, 1); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
