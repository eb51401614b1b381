package sim

import (
	"math"
	"testing"
)

// TestWindowAccuracy: the best and worst 10 s windows' mean served accuracy; a window of too few replies is left
// out, and so is the last, incomplete one.
func TestWindowAccuracy(t *testing.T) {
	var secs []Second
	add := func(n, ok int, acc float64) {
		for range n {
			secs = append(secs, Second{OK: ok, AccuracySum: float64(ok) * acc})
		}
	}
	add(10, 10, 0.45) // best
	add(10, 1, 0.10)  // too few replies to count
	add(10, 10, 0.30) // worst
	add(10, 10, 0.40)
	add(5, 10, 0.01) // incomplete
	best, worst := windowAccuracy(secs)
	if math.Abs(best-0.45) > 1e-9 || math.Abs(worst-0.30) > 1e-9 {
		t.Errorf("best %v, worst %v; want 0.45 and 0.30", best, worst)
	}
	if b, w := windowAccuracy(secs[10:20]); b != 0 || w != 0 {
		t.Errorf("no window counted: %v, %v; want 0, 0", b, w)
	}
}
