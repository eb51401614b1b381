// Package workload describes request arrivals over time: a demand curve (requests per second, per step) and an
// arrival process around it (Poisson, or Gamma with a chosen coefficient of variation), or the exact arrival times
// of a replayed trace. Pure and seeded: the simulator and the load generator draw the same arrivals from the same
// workload and seed.
package workload

import (
	"errors"
	"fmt"
	"github.com/sleipnir-serving/sleipnir/pkg/variate"
	"math"
	"math/rand/v2"
	"time"
)

// Workload is a demand curve and the arrival process around it.
type Workload struct {
	// Name describes it in reports.
	Name string
	// Step is the length of each entry of Rates.
	Step time.Duration
	// Rates is the demand in requests per second during each step.
	Rates []float64
	// CV is the coefficient of variation of the inter-arrival times: 1 (or 0) is Poisson; otherwise a Gamma
	// renewal process (above 1 burstier than Poisson, below 1 smoother).
	CV float64
	// CVs, when set, is the coefficient of variation of each step (a workload of parts with their own: Concat),
	// in place of CV.
	CVs []float64
	// Times, when set, are exact arrival times to replay (sorted); Rates then holds their counts per step, for
	// reports.
	Times []time.Duration
}

// Duration is how long the workload lasts.
func (w *Workload) Duration() time.Duration { return time.Duration(len(w.Rates)) * w.Step }

// RateAt is the demand at t.
func (w *Workload) RateAt(t time.Duration) float64 {
	i := int(t / w.Step)
	if t < 0 || i >= len(w.Rates) {
		return 0
	}
	return w.Rates[i]
}

// Validate checks that the workload can be drawn from.
func (w *Workload) Validate() error {
	switch {
	case w.Step <= 0:
		return errors.New("workload: step must be positive")
	case len(w.Rates) == 0:
		return errors.New("workload: no demand")
	case w.CV < 0 || math.IsNaN(w.CV) || math.IsInf(w.CV, 0):
		return fmt.Errorf("workload: coefficient of variation %v: want a positive number", w.CV)
	case w.CVs != nil && len(w.CVs) != len(w.Rates):
		return fmt.Errorf("workload: %d coefficients of variation for %d steps", len(w.CVs), len(w.Rates))
	}
	for i, cv := range w.CVs {
		if !(cv > 0) || math.IsInf(cv, 0) {
			return fmt.Errorf("workload: coefficient of variation %v at step %d: want a positive number", cv, i)
		}
	}
	for i, r := range w.Rates {
		if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
			return fmt.Errorf("workload: rate %v at step %d: want a finite rate >= 0", r, i)
		}
	}
	return nil
}

// Arrivals draws the arrival times of a workload in order. Not safe for concurrent use.
type Arrivals struct {
	w   *Workload
	rng *rand.Rand
	// The renewal process runs in operational time (expected arrivals so far): an arrival at operational time s
	// happens at the t where the integral of the rate up to t reaches s (time rescaling). This keeps a Gamma
	// process's burstiness at any rate, and follows the curve exactly on average.
	shape  float64 // of the Gamma inter-arrival distribution, 1/CV^2 (of the step the last arrival fell in)
	s      float64 // operational time of the next arrival
	step   int     // step the rescaling has reached
	atStep float64 // operational time at the start of step
	replay int     // next index into w.Times
}

// Arrivals starts drawing the arrivals of w with seed.
func (w *Workload) Arrivals(seed uint64) *Arrivals {
	a := &Arrivals{w: w, rng: rand.New(rand.NewPCG(seed, 0xa77))}
	a.setShape(0)
	a.s = a.interval()
	return a
}

// Next returns the time of the next arrival since the start, or false when the workload is over.
func (a *Arrivals) Next() (time.Duration, bool) {
	w := a.w
	if w.Times != nil {
		if a.replay >= len(w.Times) {
			return 0, false
		}
		a.replay++
		return w.Times[a.replay-1], true
	}
	for a.step < len(w.Rates) {
		per := w.Rates[a.step] * w.Step.Seconds() // expected arrivals in this step
		if a.s < a.atStep+per {
			frac := (a.s - a.atStep) / per
			t := time.Duration(a.step)*w.Step + time.Duration(frac*float64(w.Step))
			a.setShape(a.step) // the gap to the next arrival drawn as this step's burstiness says
			a.s += a.interval()
			return t, true
		}
		a.atStep += per
		a.step++
	}
	return 0, false
}

// setShape sets the Gamma shape to step i's coefficient of variation (1, Poisson, for 0).
func (a *Arrivals) setShape(i int) {
	a.shape = 1
	if cv := a.w.cvAt(i); cv > 0 {
		a.shape = 1 / (cv * cv)
	}
}

// interval draws an inter-arrival time in operational time: mean 1, coefficient of variation CV.
func (a *Arrivals) interval() float64 {
	if a.shape == 1 {
		return a.rng.ExpFloat64()
	}
	return variate.Gamma(a.rng, a.shape) / a.shape
}

// Constant is a steady demand of qps for d.
func Constant(qps float64, d time.Duration) *Workload {
	return &Workload{Name: fmt.Sprintf("constant %g QPS", qps), Step: d, Rates: []float64{qps}}
}

// Diurnal is a day compressed into d, in steps of step: the demand follows one period of a smooth day curve (a
// trough at the start and the end, a morning rise, a peak in the afternoon), scaled so that its minimum is lo and
// its maximum hi.
func Diurnal(lo, hi float64, d, step time.Duration) *Workload {
	n := max(1, int(d/step))
	rates := make([]float64, n)
	for i := range rates {
		x := (float64(i) + 0.5) / float64(n) // fraction of the day
		// Two harmonics: the main daily swing, and a second that steepens the morning rise and broadens the peak.
		rates[i] = -math.Cos(2*math.Pi*x) - 0.35*math.Cos(4*math.Pi*x-0.6)
	}
	return &Workload{Name: fmt.Sprintf("diurnal %g-%g QPS", lo, hi), Step: step, Rates: ScaleMinMax(rates, lo, hi)}
}

// ScaleMinMax maps values linearly so that their minimum becomes lo and their maximum hi, preserving the shape
// (as the Loki authors scaled the Azure Functions trace to their cluster). A flat series becomes hi.
func ScaleMinMax(values []float64, lo, hi float64) []float64 {
	mn, mx := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		mn, mx = min(mn, v), max(mx, v)
	}
	out := make([]float64, len(values))
	for i, v := range values {
		if mx > mn {
			out[i] = lo + (v-mn)/(mx-mn)*(hi-lo)
		} else {
			out[i] = hi
		}
	}
	return out
}

// Smooth averages each value with its neighbours within half a window (a centred moving average), so that a
// trace's per-second noise does not drive the min-max scaling.
func Smooth(values []float64, window int) []float64 {
	if window <= 1 {
		return append([]float64(nil), values...)
	}
	out := make([]float64, len(values))
	half := window / 2
	for i := range values {
		lo, hi := max(0, i-half), min(len(values), i+half+1)
		sum := 0.0
		for _, v := range values[lo:hi] {
			sum += v
		}
		out[i] = sum / float64(hi-lo)
	}
	return out
}
