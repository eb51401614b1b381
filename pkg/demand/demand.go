// Package demand estimates a pipeline's request rate from the counts its frontends report: the sum of every live
// frontend's latest rate, smoothed by an exponentially weighted moving average (as Loki's resource manager does).
// Pure: the planner and the simulator use it.
package demand

import "time"

// Estimator is one pipeline's demand estimate. Not safe for concurrent use.
type Estimator struct {
	// Alpha is the weight of the newest total rate in the average, in (0, 1].
	Alpha float64
	// Silence is how long a frontend may go without reporting before its rate no longer counts.
	Silence time.Duration

	frontends map[string]report
	estimate  float64
	primed    bool
}

type report struct {
	rate float64
	at   time.Time
}

// New returns an estimator; alpha 0 means 0.3, silence 0 means 5 s.
func New(alpha float64, silence time.Duration) *Estimator {
	if alpha <= 0 || alpha > 1 {
		alpha = 0.3
	}
	if silence <= 0 {
		silence = 5 * time.Second
	}
	return &Estimator{Alpha: alpha, Silence: silence, frontends: map[string]report{}}
}

// Observe records that a frontend accepted count requests over interval, reported at now.
func (e *Estimator) Observe(frontend string, count int, interval time.Duration, now time.Time) {
	if interval <= 0 {
		return
	}
	e.frontends[frontend] = report{rate: float64(count) / interval.Seconds(), at: now}
}

// Tick folds the current total rate into the average; call it once per reporting interval. It returns the estimate.
func (e *Estimator) Tick(now time.Time) float64 {
	total := 0.0
	for id, r := range e.frontends {
		if now.Sub(r.at) > e.Silence {
			delete(e.frontends, id)
			continue
		}
		total += r.rate
	}
	if !e.primed {
		e.estimate, e.primed = total, true
	} else {
		e.estimate = e.Alpha*total + (1-e.Alpha)*e.estimate
	}
	return e.estimate
}

// Estimate is the current estimate, in requests per second.
func (e *Estimator) Estimate() float64 { return e.estimate }

// Moved reports whether the estimate differs from a previous one by more than the relative threshold (and at least
// 1 request per second, so that noise around zero is not news).
func Moved(previous, current, threshold float64) bool {
	d := current - previous
	if d < 0 {
		d = -d
	}
	return d >= 1 && d > threshold*previous
}
