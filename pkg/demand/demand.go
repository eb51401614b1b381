// Package demand estimates a pipeline's request rate from the counts its frontends report: the sum of every live
// frontend's latest rate, smoothed by an exponentially weighted moving average (as Loki's resource manager does).
// Pure: the planner and the simulator use it.
//
// A steady Poisson load moves such an average by about sqrt(rate/window) (Window): Significant tells a move worth a
// new plan from that noise. A step (one interval's total many standard deviations away) is taken at once rather than
// averaged towards, so a real surge is seen within a report interval; so is a shift (two intervals in a row beyond
// 3 standard deviations, on the same side), within two.
//
// No report is not zero demand: when every frontend of a pipeline has gone silent (stopped, or cut off by a network
// blip), the estimate holds; a frontend that reports zero requests is zero demand.
package demand

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Estimator is one pipeline's demand estimate. Not safe for concurrent use.
type Estimator struct {
	// Alpha is the weight of the newest total rate in the average, in (0, 1].
	Alpha float64
	// Silence is the longest a frontend may go without reporting before its rate no longer counts; one that reports
	// every interval stops counting sooner, once it has missed two reports (MissedReports intervals): a frontend
	// killed while others take its clients would otherwise be counted twice, its last rate and the others' new
	// ones (in the fault suite, a 100 QPS load was estimated at 134 QPS and planned in accuracy mode for 3 s).
	Silence time.Duration
	// Warmup is how long reports are gathered, after none were live, before their total moves the estimate:
	// frontends report out of step, and the first second's total may hold only some of them. 0: at once.
	Warmup time.Duration
	// MaxRate, when positive, is the largest rate one report may claim (requests per second); Observe refuses
	// reports above it, so that one forged report cannot hold the plans at its rate while the average decays.
	MaxRate float64
	// StepSigmas and StepRatio say what a step is: a tick whose total rate differs from the estimate by more than
	// StepSigmas standard deviations of one interval's Poisson noise at the estimate, and by more than StepRatio of
	// it. The estimate then jumps to that total. A steady load makes such a tick about once in 10^5 (5 sigma).
	// Negative StepSigmas: never. Only rises are steps: a fall waits for the shift rule's second tick, since one
	// low tick is as often a frontend that could not count its requests for a moment (on a saturated machine, a
	// second's count came in at half the rate and the next at one and a half: taken as two steps, they re-planned
	// the cluster twice), and a plan sized a second too long costs less than one sized too short.
	StepSigmas, StepRatio float64
	// ShiftSigmas says what a shift is: two ticks in a row whose totals are both more than ShiftSigmas standard
	// deviations away from the estimate, on the same side. The estimate then jumps to their mean: a load that
	// moved by less than a step is not averaged towards for many seconds, each of them a plan for a demand already
	// gone. A steady load makes such a pair about once in 10^5-10^6 ticks (3 sigma). Negative: never.
	ShiftSigmas float64
	// RelativeError, when positive, sizes the average to the rate: at low rates Alpha is lowered until a steady
	// Poisson load moves the estimate by at most this share of itself (one standard deviation), so that the
	// estimate does not swing on noise (at 10 QPS and Alpha 0.3, one standard deviation is 13%, and a steady load
	// was seen estimated between 4.7 and 11.6 QPS). The average then spans at most MaxWindow. Steps and shifts are
	// still taken at once, so a real change is not averaged towards any slower.
	RelativeError float64
	MaxWindow     time.Duration

	frontends map[string]report
	estimate  float64
	primed    bool
	since     time.Time // when the reports now live began arriving; zero when none is live
	// warm adds up, per frontend, what it reported before the estimate was primed: the first estimate is the mean
	// rate over the warm-up, not the rate of its last second.
	warm map[string]*warmCounts
	// interval is the latest report's interval: the span of one tick's total.
	interval time.Duration
	// beyond is the previous tick's total when it was ShiftSigmas away from the estimate (above: sign 1, below: -1;
	// 0: it was not).
	beyond     float64
	beyondSign int
	// provisional says the estimate is a step taken at newest arrivals' rate (stepTo); steppedAt is the newest
	// report it was taken from. The first tick at which every live frontend has reported since replaces it with the
	// total.
	provisional bool
	steppedAt   time.Time
}

// MaxInterval is the longest interval a report may cover: a frontend reports every second or so.
const MaxInterval = time.Minute

// ErrReport says a demand report was refused: its interval, count or rate is not one a frontend sends.
var ErrReport = errors.New("demand report refused")

type warmCounts struct{ requests, seconds float64 }

// Defaults of the step rule (Estimator.StepSigmas, StepRatio).
const (
	DefaultStepSigmas = 5
	DefaultStepRatio  = 0.25
	// DefaultShiftSigmas is Estimator.ShiftSigmas's default.
	DefaultShiftSigmas = 3
	// DefaultRelativeError and DefaultMaxWindow size the average to the rate (Estimator.RelativeError): 5% at
	// 10 QPS takes a 30 s average, and above about 70 QPS the plain Alpha of 0.3 is already that steady.
	DefaultRelativeError = 0.05
	DefaultMaxWindow     = 30 * time.Second
)

type report struct {
	rate     float64
	at       time.Time
	interval time.Duration
	// newest is the rate of the report's newest arrivals when they are significantly above rate (Newest); else 0.
	newest float64
}

// MissedReports is how many of its report intervals a frontend may be silent for before its rate no longer counts
// (capped by Estimator.Silence). A frontend that cannot report cannot take requests either: both go over its one
// NATS connection.
const MissedReports = 2.5

// expired says r no longer counts at now.
func (e *Estimator) expired(r report, now time.Time) bool {
	age := now.Sub(r.at)
	return age > e.Silence || age > time.Duration(MissedReports*float64(r.interval))
}

// FollowSteps makes the estimate take steps and shifts of the load at once (the default StepSigmas, StepRatio and
// ShiftSigmas), as it must when re-plans wait for significant moves (control.Config.ReplanSigmas). Alone, a plain
// average did better: on the simulator's Azure trace Loki missed 0.35% with it and 0.38% with the steps taken.
func (e *Estimator) FollowSteps() {
	e.StepSigmas, e.StepRatio, e.ShiftSigmas = DefaultStepSigmas, DefaultStepRatio, DefaultShiftSigmas
}

// New returns an estimator; alpha 0 means 0.3, silence 0 means 5 s. It takes no steps or shifts (StepSigmas and
// ShiftSigmas -1): FollowSteps turns them on.
func New(alpha float64, silence time.Duration) *Estimator {
	if alpha <= 0 || alpha > 1 {
		alpha = 0.3
	}
	if silence <= 0 {
		silence = 5 * time.Second
	}
	return &Estimator{Alpha: alpha, Silence: silence, StepSigmas: -1, StepRatio: DefaultStepRatio, ShiftSigmas: -1,
		frontends: map[string]report{}}
}

// Observe records that a frontend accepted count requests over interval, reported at now. It refuses (ErrReport) a
// report whose interval is not in (0, MaxInterval], whose count is negative, or whose rate exceeds MaxRate.
func (e *Estimator) Observe(frontend string, count int, interval time.Duration, now time.Time) error {
	if interval <= 0 || interval > MaxInterval || count < 0 {
		return fmt.Errorf("%w: %d requests in %v", ErrReport, count, interval)
	}
	rate := float64(count) / interval.Seconds()
	if e.MaxRate > 0 && rate > e.MaxRate || math.IsInf(rate, 0) {
		return fmt.Errorf("%w: %.0f requests per second, above the limit of %.0f", ErrReport, rate, e.MaxRate)
	}
	if len(e.frontends) == 0 && e.since.IsZero() {
		e.since = now
	}
	e.frontends[frontend] = report{rate: rate, at: now, interval: interval}
	e.interval = interval
	if !e.primed {
		if e.warm == nil {
			e.warm = map[string]*warmCounts{}
		}
		w := e.warm[frontend]
		if w == nil {
			w = &warmCounts{}
			e.warm[frontend] = w
		}
		w.requests += float64(count)
		w.seconds += interval.Seconds()
	}
	return nil
}

// Newest records the times between the newest arrivals of frontend's latest report (its gaps, oldest first, in
// milliseconds, as wire.DemandReport.GapsMs), with dispersion, which says how bursty the frontend's arrivals are (the
// squared coefficient of variation of its gaps, 1 for Poisson arrivals; called only when the gaps are fast enough
// for it to matter, since it reads thousands of them): a step then taken is taken at their rate where it is
// NewestSigmas standard deviations of their noise above the report's whole interval (stepTo). Call it after Observe,
// with the same report (Observe clears the newest rate of the one before). Fewer than MinNewestGaps gaps, or a
// dispersion unknown (NaN) or above MaxNewestDispersion, record nothing.
func (e *Estimator) Newest(frontend string, gaps []float32, dispersion func() float64) {
	r, ok := e.frontends[frontend] // Observe's new report: no newest rate yet
	n := len(gaps)
	if !ok || n < MinNewestGaps {
		return
	}
	span := 0.0
	for _, g := range gaps {
		span += float64(g)
	}
	if !(span > 0) {
		return
	}
	// n gaps of a renewal process at rate λ add up to about n/λ, with a relative standard deviation of
	// sqrt(dispersion/n); (n-1)/span is the unbiased rate of Poisson arrivals. The least dispersion is 1.
	rate := float64(n-1) / (span / 1000)
	if rate <= r.rate*(1+NewestSigmas*math.Sqrt(1/float64(n))) {
		return
	}
	d := dispersion()
	noise := math.Sqrt(d / float64(n))
	if !(d >= 1) || d > MaxNewestDispersion || rate <= r.rate*(1+NewestSigmas*noise) {
		return
	}
	// Counted one standard deviation high: 128 gaps of the load generator's arrivals (dispersion 1.4) told a step
	// to 600 QPS as 493 to 680, and a plan too small refuses what it lacks until the next whole interval's total
	// replaces the estimate and the control loop's thresholds re-plan, where one too large costs some accuracy.
	r.newest = rate * (1 + noise)
	if e.MaxRate > 0 {
		r.newest = min(r.newest, e.MaxRate)
	}
	e.frontends[frontend] = r
}

// MinNewestGaps and NewestSigmas say when a report's newest arrivals count at their own rate in a step (Newest):
// at least 64 gaps, and that rate more than 2 standard deviations of its noise above the interval's. 64 gaps of
// Poisson arrivals tell their rate within 12.5%. They count only where the interval's total is itself a step (5
// standard deviations of a steady load's): the load rose, and its newest arrivals are the nearest to its rate now.
//
// MaxNewestDispersion: burstier arrivals' newest gaps tell a burst, not a rate. At CV 4 (dispersion 16) a steady
// 600 QPS makes a second's total a step every few seconds, and its newest 128 gaps, in a burst, twice its mean or
// more: taken at their rate, the simulator's TestBurstyArrivalsPlanned missed 2.8% where it misses under 1%.
const (
	MinNewestGaps       = 64
	NewestSigmas        = 2
	MaxNewestDispersion = 2
)

// Grace counts every frontend's latest report as if it had arrived at now: for a planner whose own connection was
// down, reports the bus could not carry were not missed by the frontends (planner.Planner calls it while it is
// disconnected and when it is back, as control.Liveness.Grace for the workers).
func (e *Estimator) Grace(now time.Time) {
	for id, r := range e.frontends {
		r.at = now
		e.frontends[id] = r
	}
}

// Seed sets the estimate, as if the average had reached qps: a restarted planner starts from the demand the plan
// in force was sized for rather than from nothing.
func (e *Estimator) Seed(qps float64) {
	if qps >= 0 && !math.IsInf(qps, 0) {
		e.estimate, e.primed = qps, true
		e.warm, e.provisional = nil, false
	}
}

// Known says the estimate rests on data: reports folded in, or a seed. Before that it is 0 for want of data.
func (e *Estimator) Known() bool { return e.primed }

// Stepped says the reports live at now add up to a step from the estimate (StepSigmas, StepRatio), or replace a
// provisional one (Provisional): the next Tick will take it. The planner ticks at once when a report makes one,
// rather than at its next tick, up to a second later.
func (e *Estimator) Stepped(now time.Time) bool {
	if !e.primed || now.Sub(e.since) < e.Warmup {
		return false
	}
	if e.provisional {
		return e.reportedSince(now, e.steppedAt)
	}
	total := 0.0
	for _, r := range e.frontends {
		if !e.expired(r, now) {
			total += r.rate
		}
	}
	return e.step(total)
}

// Tick folds the current total rate into the average; call it once per reporting interval. It returns the estimate.
// With no frontend live, or while reports are gathered for Warmup, the estimate holds.
func (e *Estimator) Tick(now time.Time) float64 {
	total := 0.0
	for id, r := range e.frontends {
		if e.expired(r, now) {
			delete(e.frontends, id)
			continue
		}
		total += r.rate
	}
	if len(e.frontends) == 0 {
		e.since = time.Time{} // no data: hold; when reports come back, gather them for Warmup again
		return e.estimate
	}
	if now.Sub(e.since) < e.Warmup {
		return e.estimate
	}
	if !e.primed {
		total = 0
		for id := range e.frontends {
			if w := e.warm[id]; w != nil && w.seconds > 0 {
				total += w.requests / w.seconds
			}
		}
		e.warm = nil
		e.estimate, e.primed = total, true
	} else if e.provisional && !e.reportedSince(now, e.steppedAt) {
		// held: a frontend's whole interval since the step is still to come
	} else if e.provisional {
		e.estimate, e.provisional = total, false
	} else if e.step(total) {
		e.estimate, e.provisional = e.stepTo(now, total)
		e.beyondSign = 0
	} else if mean, ok := e.shift(total); ok {
		e.estimate = mean
	} else {
		a := e.alpha()
		e.estimate = a*total + (1-a)*e.estimate
	}
	return e.estimate
}

// stepTo is the rate a step is taken at: total, with each live report whose newest arrivals came significantly
// faster than its interval's mean counted at their rate (Newest). The load rose within the interval: its mean is of
// the rates before and after, and a plan for it (310 QPS half a second after a step from 100 to 600) is a plan too
// small, replaced a second later. provisional says newest arrivals counted: their rate rests on a hundred arrivals
// or so, and the first total of whole intervals since replaces it.
func (e *Estimator) stepTo(now time.Time, total float64) (rate float64, provisional bool) {
	for _, r := range e.frontends {
		if e.expired(r, now) {
			continue
		}
		if r.newest > r.rate {
			total += r.newest - r.rate
			provisional = true
		}
		if r.at.After(e.steppedAt) {
			e.steppedAt = r.at // not now: a tick may be stamped before the report that made its step arrived
		}
	}
	return total, provisional
}

// reportedSince says every live frontend has reported after at: its interval is whole since then.
func (e *Estimator) reportedSince(now, at time.Time) bool {
	for _, r := range e.frontends {
		if !e.expired(r, now) && !r.at.After(at) {
			return false
		}
	}
	return true
}

// Provisional says the estimate is a step taken at the rate of newest arrivals (stepTo), until every frontend's
// next report.
func (e *Estimator) Provisional() bool { return e.provisional }

// alpha is the weight of the newest tick in force: Alpha, or less at a low estimate (RelativeError).
func (e *Estimator) alpha() float64 {
	if e.RelativeError <= 0 {
		return e.Alpha
	}
	// A plain mean over n ticks of span s has the standard deviation sqrt(rate/(n*s)); the average has the variance
	// of a plain mean over (2-a)/a ticks.
	tick := e.tickSpan().Seconds()
	n := 1 / (e.RelativeError * e.RelativeError * max(e.estimate, 1) * tick)
	if e.MaxWindow > 0 {
		n = min(n, e.MaxWindow.Seconds()/tick)
	}
	return min(e.Alpha, 2/(n+1))
}

// shift notes whether total is ShiftSigmas away from the estimate, and says (with the mean of the two) when the
// previous tick's was too, on the same side.
func (e *Estimator) shift(total float64) (float64, bool) {
	if e.ShiftSigmas < 0 {
		return 0, false
	}
	sign := 0
	if d := total - e.estimate; math.Abs(d) > e.ShiftSigmas*e.sigma() {
		sign = 1
		if d < 0 {
			sign = -1
		}
	}
	if sign != 0 && sign == e.beyondSign {
		e.beyondSign = 0
		return (total + e.beyond) / 2, true
	}
	e.beyond, e.beyondSign = total, sign
	return 0, false
}

// sigma is the standard deviation of one tick's total on a steady Poisson load at the estimate.
func (e *Estimator) sigma() float64 { return math.Sqrt(max(e.estimate, 1) / e.tickSpan().Seconds()) }

// step says a tick's total is a step away from the estimate (StepSigmas, StepRatio).
func (e *Estimator) step(total float64) bool {
	if e.StepSigmas < 0 {
		return false
	}
	d := total - e.estimate
	return d > e.StepSigmas*e.sigma() && d > e.StepRatio*e.estimate
}

func (e *Estimator) tickSpan() time.Duration {
	if e.interval <= 0 {
		return time.Second
	}
	return e.interval
}

// Window is the span the estimate averages over, in effect: an exponentially weighted average of one total per
// tick (ticks a report interval apart) has the variance of a plain mean over (2-Alpha)/Alpha ticks. On a steady
// Poisson load of rate r the estimate's standard deviation is sqrt(r/Window) (in seconds).
func (e *Estimator) Window() time.Duration {
	a := e.alpha()
	return time.Duration(float64(e.tickSpan()) * (2 - a) / a)
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

// Significant reports whether the estimate moved from previous to current by more than Moved's threshold and by
// more than sigmas standard deviations of what a steady Poisson load at the previous rate leaves between two
// estimates averaged over window: each has sqrt(previous/window), their difference sqrt(2) times that. A window of
// 0 tests the threshold alone (Moved).
func Significant(previous, current, threshold, sigmas float64, window time.Duration) bool {
	if !Moved(previous, current, threshold) {
		return false
	}
	if window <= 0 {
		return true
	}
	noise := math.Sqrt(2 * max(previous, 1) / window.Seconds())
	return math.Abs(current-previous) > sigmas*noise
}
