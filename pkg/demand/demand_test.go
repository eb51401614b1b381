package demand

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func TestEstimator(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := time.Second
	e := New(0.5, 3*time.Second)
	e.StepSigmas = -1 // the average's arithmetic, without the step rule (TestEstimatorStep)
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

// TestEstimatorStep: a tick far outside a steady load's noise is a step, taken at once; one within it is averaged;
// two in a row beyond 3 sigma are a shift, taken at the second.
func TestEstimatorStep(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := New(0.3, 0)
	e.FollowSteps()
	e.Seed(100)
	e.Observe("f", 130, time.Second, t0) // 3 sigma of one second at 100 QPS: noise, averaged
	if got := e.Tick(t0); math.Abs(got-109) > 1e-9 {
		t.Fatalf("after 130 requests in a second at 100 QPS: %v, want the average 109", got)
	}
	if e.Stepped(t0) {
		t.Fatal("130 at 100 QPS said to be a step")
	}
	e.Observe("f", 600, time.Second, t0.Add(time.Second))
	if !e.Stepped(t0.Add(time.Second)) {
		t.Fatal("600 at 109 QPS not said to be a step before the tick")
	}
	if got := e.Tick(t0.Add(time.Second)); got != 600 {
		t.Fatalf("after a second of 600 at 109 QPS: %v, want the step taken, 600", got)
	}
	// At 1 QPS, 8 requests in a second is 7 sigma but only 7 requests: a step too (the ratio holds).
	e.Seed(1)
	e.Observe("f", 8, time.Second, t0.Add(2*time.Second))
	if got := e.Tick(t0.Add(2 * time.Second)); got != 8 {
		t.Fatalf("8 requests at 1 QPS: %v, want 8", got)
	}
	// A shift: two seconds in a row 3-5 sigma above (as the estimate catches up with a load that started
	// mid-interval): the estimate jumps to their mean at the second.
	e.Seed(57)
	e.Observe("f", 85, time.Second, t0.Add(3*time.Second)) // 3.7 sigma
	if got := e.Tick(t0.Add(3 * time.Second)); math.Abs(got-65.4) > 1e-9 {
		t.Fatalf("one second 3.7 sigma above 57: %v, want the average 65.4", got)
	}
	e.Observe("f", 99, time.Second, t0.Add(4*time.Second)) // 4.1 sigma above 65.4
	if got := e.Tick(t0.Add(4 * time.Second)); got != 92 {
		t.Fatalf("a second second beyond 3 sigma: %v, want the shift taken, 92", got)
	}
	if w := e.Window(); math.Abs(w.Seconds()-1.7/0.3) > 1e-6 {
		t.Fatalf("window %v, want (2-0.3)/0.3 s", w)
	}
	// A fall is no step: one second at half the rate is averaged; a second one makes it a shift.
	e.Seed(600)
	e.Observe("f", 300, time.Second, t0.Add(5*time.Second))
	if got := e.Tick(t0.Add(5 * time.Second)); math.Abs(got-510) > 1e-9 {
		t.Fatalf("one second at 300 after 600: %v, want the average 510, not a step", got)
	}
	e.Observe("f", 310, time.Second, t0.Add(6*time.Second))
	if got := e.Tick(t0.Add(6 * time.Second)); got != 305 {
		t.Fatalf("a second second at 310: %v, want the shift taken, 305", got)
	}
}

// TestEstimatorSizesItsWindowToTheRate: with RelativeError, a low rate is averaged longer (up to MaxWindow), so that
// a steady Poisson load moves the estimate by about RelativeError; a high one keeps Alpha.
func TestEstimatorSizesItsWindowToTheRate(t *testing.T) {
	e := New(0.3, 0)
	e.RelativeError, e.MaxWindow = 0.05, 30*time.Second
	e.Seed(10)
	if w := e.Window(); math.Abs(w.Seconds()-30) > 0.01 {
		t.Fatalf("window at 10 QPS: %v, want 30 s (40 s capped)", w)
	}
	e.Seed(50)
	if w := e.Window(); math.Abs(w.Seconds()-8) > 0.01 {
		t.Fatalf("window at 50 QPS: %v, want 8 s (1/(0.05^2 * 50))", w)
	}
	e.Seed(300)
	if w := e.Window(); math.Abs(w.Seconds()-1.7/0.3) > 1e-6 {
		t.Fatalf("window at 300 QPS: %v, want Alpha's (2-0.3)/0.3 s", w)
	}
	// The estimate of a steady 10 QPS Poisson load, over 10 minutes: within +-20% (4 standard deviations of the
	// sized window's noise), where Alpha 0.3 alone swung 4.7-11.6 in the run.
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Unix(1000, 0)
	e.Seed(10)
	lo, hi := 10.0, 10.0
	for s := range 600 {
		n := 0
		for at := rng.ExpFloat64() / 10; at < 1; at += rng.ExpFloat64() / 10 {
			n++
		}
		now := t0.Add(time.Duration(s) * time.Second)
		e.Observe("f", n, time.Second, now)
		got := e.Tick(now)
		lo, hi = min(lo, got), max(hi, got)
	}
	if lo < 8 || hi > 12 {
		t.Fatalf("a steady 10 QPS estimated between %.1f and %.1f, want within 8-12", lo, hi)
	}
}

// TestSignificant: a move counts when past the threshold and past the noise of two estimates of the previous rate.
func TestSignificant(t *testing.T) {
	w := 5 * time.Second // noise of the difference at 100 QPS: sqrt(2*100/5) = 6.3
	for _, tc := range []struct {
		prev, cur, th, sigmas float64
		window                time.Duration
		want                  bool
	}{
		{100, 110, 0.05, 3, 0, true},  // no window: the threshold alone
		{100, 110, 0.05, 3, w, false}, // 1.6 sigma
		{100, 120, 0.05, 3, w, true},  // 3.2 sigma
		{100, 104, 0.05, 0, w, false}, // under the threshold
		{10, 14, 0.2, 3, w, false},    // 40% at 10 QPS: 2 sigma
		{10, 17, 0.2, 3, w, true},
	} {
		if got := Significant(tc.prev, tc.cur, tc.th, tc.sigmas, tc.window); got != tc.want {
			t.Errorf("Significant(%v, %v, %v, %v, %v) = %v", tc.prev, tc.cur, tc.th, tc.sigmas, tc.window, got)
		}
	}
}

// TestFanoutSignificant: a factor's move counts when past the threshold and past the noise of the items it rests on;
// a variant's first estimate is compared with its profile's factor, and a variant spec has not with nothing.
func TestFanoutSignificant(t *testing.T) {
	spec := &pipeline.Spec{Tasks: []pipeline.Task{
		{Name: "detect", Children: []string{"car"}, Variants: []pipeline.Variant{
			{Name: "x", Fanout: &pipeline.Fanout{Mean: 2}}, {Name: "y", Fanout: &pipeline.Fanout{Mean: 2}}}},
		{Name: "car"},
	}}
	car := func(mean float64) pipeline.Fanout {
		return pipeline.Fanout{Mean: mean, Shares: map[string]float64{"car": 1}}
	}
	prev := map[string]pipeline.Fanout{"detect/x": car(2)}
	cur := map[string]pipeline.Fanout{"detect/x": car(2.3)}
	if !FanoutSignificant(spec, prev, cur, 0.1, 3, nil) {
		t.Error("15% without samples: want moved")
	}
	// 2 and 2.3 sub-requests per item over 100 items each: the difference's noise is sqrt((2+2.3)/100) = 0.21; 0.3
	// is 1.4 sigma.
	if FanoutSignificant(spec, prev, cur, 0.1, 3, map[string]float64{"detect/x": 100}) {
		t.Error("15% on 100 items: want noise")
	}
	if !FanoutSignificant(spec, prev, cur, 0.1, 3, map[string]float64{"detect/x": 1000}) {
		t.Error("15% on 1000 items (4.6 sigma): want moved")
	}
	// y measured for the first time: its profile's 2 was planned with.
	cur["detect/y"] = car(2.05)
	prev["detect/x"] = cur["detect/x"]
	if FanoutSignificant(spec, prev, cur, 0.1, 3, map[string]float64{"detect/y": 200}) {
		t.Error("a first estimate at its profile's factor: want no move")
	}
	cur["detect/y"] = car(3)
	if !FanoutSignificant(spec, prev, cur, 0.1, 3, map[string]float64{"detect/y": 200}) {
		t.Error("a first estimate 50% over its profile's factor on 200 items (8 sigma): want moved")
	}
	// Its noise is the estimate's alone (the profile has none): 2.4 over 2 on 200 items is 0.4 / sqrt(2.4/200), 3.7
	// sigma, where two estimates would be 2.7.
	cur["detect/y"] = car(2.4)
	if !FanoutSignificant(spec, prev, cur, 0.1, 3, map[string]float64{"detect/y": 200}) {
		t.Error("a first estimate 20% over its profile's factor on 200 items (3.7 sigma): want moved")
	}
	delete(cur, "detect/y")
	cur["detect/gone"] = car(9)
	if FanoutSignificant(spec, prev, cur, 0.1, 3, nil) {
		t.Error("a variant spec has not: want no move")
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

func TestFanoutEstimator(t *testing.T) {
	spec := &pipeline.Spec{Tasks: []pipeline.Task{
		{Name: "detect", Children: []string{"car", "face"}}, {Name: "car"}, {Name: "face"},
	}}
	e := NewFanoutEstimator(0.5, 10)
	// Too few items: the profile's factor stands.
	e.Observe("detect/x", wire.FanoutCounts{Items: 5, Children: map[string]uint64{"car": 10, "face": 5}})
	e.Tick()
	if got := e.Estimate(spec); len(got) != 0 {
		t.Fatalf("estimate after 5 items: %v, want none", got)
	}
	// Two workers of the same variant in one interval add up (20 items), smoothed with the first interval.
	e.Observe("detect/x", wire.FanoutCounts{Items: 10, Children: map[string]uint64{"car": 21, "face": 9}})
	e.Observe("detect/x", wire.FanoutCounts{Items: 10, Children: map[string]uint64{"car": 21, "face": 9}})
	e.Tick()
	// items 0.5*20+0.5*5 = 12.5; car 0.5*42+0.5*10 = 26; face 0.5*18+0.5*5 = 11.5.
	f, ok := e.Estimate(spec)["detect/x"]
	if !ok {
		t.Fatal("no estimate after 25 items")
	}
	if math.Abs(f.Mean-37.5/12.5) > 1e-9 || math.Abs(f.Shares["car"]-26/37.5) > 1e-9 {
		t.Fatalf("estimate %+v, want mean 3 and car share %.4f", f, 26/37.5)
	}
	// An idle interval changes nothing.
	e.Tick()
	if g := e.Estimate(spec)["detect/x"]; g.Mean != f.Mean {
		t.Fatalf("idle interval moved the estimate: %v -> %v", f.Mean, g.Mean)
	}
	// Leaf tasks have no factor.
	e.Observe("car/y", wire.FanoutCounts{Items: 100})
	e.Tick()
	if _, ok := e.Estimate(spec)["car/y"]; ok {
		t.Fatal("estimate for a leaf task")
	}
}

// TestEstimatorHoldsWithoutReports: when every frontend goes silent the estimate holds (no data is not zero demand),
// while a frontend that reports zero requests brings it down.
func TestEstimatorHoldsWithoutReports(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := time.Second
	e := New(0.5, 3*time.Second)
	for i := 0; i < 5; i++ {
		e.Observe("f1", 100, sec, t0.Add(time.Duration(i)*sec))
		e.Tick(t0.Add(time.Duration(i) * sec))
	}
	for i := 5; i < 30; i++ { // the frontend is down (or cut off) for 25 s
		if got := e.Tick(t0.Add(time.Duration(i) * sec)); got != 100 {
			t.Fatalf("%d s after the last report the estimate is %v, want 100 held", i-4, got)
		}
	}
	for i := 30; i < 40; i++ { // it is back, and reports zero
		e.Observe("f1", 0, sec, t0.Add(time.Duration(i)*sec))
		e.Tick(t0.Add(time.Duration(i) * sec))
	}
	if got := e.Estimate(); got > 1 {
		t.Fatalf("after 10 s of reports of zero the estimate is %v, want about 0", got)
	}
}

// TestEstimatorWarmupAndSeed: a seeded estimator (a restarted planner) starts from the seed and holds it while the
// first reports are gathered for Warmup, so the first second's partial total (one frontend of three reported) does
// not move it; then it averages from the seed.
func TestEstimatorWarmupAndSeed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := time.Second
	e := New(0.5, 3*time.Second)
	e.Warmup = 2 * sec
	if e.Known() || e.Tick(t0) != 0 || e.Known() {
		t.Fatal("an estimator without reports or a seed should not know the demand")
	}
	e.Seed(300)
	if !e.Known() || e.Tick(t0) != 300 {
		t.Fatalf("seeded: known %v, estimate %v", e.Known(), e.Estimate())
	}
	e.Observe("f1", 100, sec, t0.Add(sec)) // f2 and f3 report later in their second
	if got := e.Tick(t0.Add(sec)); got != 300 {
		t.Fatalf("one frontend of three after 1 s: estimate %v, want 300 held during the warm-up", got)
	}
	for _, f := range []string{"f1", "f2", "f3"} {
		e.Observe(f, 100, sec, t0.Add(2*sec))
	}
	if got := e.Tick(t0.Add(3 * sec)); got != 300 {
		t.Fatalf("after the warm-up with all three: %v, want 300", got)
	}

	// Unseeded, the warm-up leaves the demand unknown, then the first full total primes it.
	u := New(0.5, 3*time.Second)
	u.Warmup = 2 * sec
	u.Observe("f1", 50, sec, t0)
	if u.Tick(t0.Add(sec)); u.Known() {
		t.Fatal("known during the warm-up")
	}
	u.Observe("f1", 50, sec, t0.Add(2*sec))
	u.Observe("f2", 70, sec, t0.Add(2*sec))
	if got := u.Tick(t0.Add(2 * sec)); !u.Known() || got != 120 {
		t.Fatalf("after the warm-up: known %v, estimate %v, want 120", u.Known(), got)
	}
}

// TestEstimatorRefusesAbsurdReports: a report claiming more than MaxRate, a negative count or an interval that is
// not a frontend's is refused and leaves the estimate alone.
func TestEstimatorRefusesAbsurdReports(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := New(1, 0)
	e.MaxRate = 10000
	if err := e.Observe("f", 50, time.Second, t0); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		count    int
		interval time.Duration
	}{{1_000_000, time.Second}, {-5, time.Second}, {5, 0}, {5, -time.Second}, {5, time.Hour}, {1, time.Nanosecond}} {
		if err := e.Observe("forger", r.count, r.interval, t0); !errors.Is(err, ErrReport) {
			t.Errorf("report of %d in %v: %v, want refused", r.count, r.interval, err)
		}
	}
	if got := e.Tick(t0); got != 50 {
		t.Fatalf("estimate %v after refused reports, want 50", got)
	}
}

// TestFanoutSeed: a seeded factor is the estimate until heartbeats move it.
func TestFanoutSeed(t *testing.T) {
	spec, err := pipeline.Parse([]byte(`
name: f
slo_ms: 1000
tasks:
  - name: a
    children: [b, c]
    variants: [{name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1, shares: {b: 0.5, c: 0.5}}, profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]}]
  - name: b
    variants: [{name: y, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]}]
  - name: c
    variants: [{name: z, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	e := NewFanoutEstimator(0.5, 0)
	e.Seed("a/x", pipeline.Fanout{Mean: 4, Shares: map[string]float64{"b": 0.75, "c": 0.25}}, []string{"b", "c"})
	e.Tick()
	f, ok := e.Estimate(spec)["a/x"]
	if !ok || math.Abs(f.Mean-4) > 1e-9 || math.Abs(f.Shares["b"]-0.75) > 1e-9 {
		t.Fatalf("seeded estimate %+v (%v), want mean 4, 3/4 to b", f, ok)
	}
	e.Observe("a/x", wire.FanoutCounts{Items: 20, Children: map[string]uint64{"b": 20, "c": 20}})
	e.Tick()
	if f := e.Estimate(spec)["a/x"]; math.Abs(f.Mean-3) > 1e-9 {
		t.Fatalf("after one interval of factor 2: mean %v, want 3 (halfway at alpha 0.5)", f.Mean)
	}
}

// TestEstimatorPrimesFromTheWarmupsMean: the first estimate is the mean rate over the warm-up, not the last
// second's: a burst of 5 requests in one second of three is 5/3 QPS, not 5.
func TestEstimatorPrimesFromTheWarmupsMean(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := time.Second
	e := New(0.5, 3*sec)
	e.Warmup = 2 * sec
	for i, n := range []int{0, 5, 0} {
		e.Observe("f1", n, sec, t0.Add(time.Duration(i)*sec))
		e.Tick(t0.Add(time.Duration(i) * sec))
	}
	if got := e.Estimate(); !e.Known() || math.Abs(got-5.0/3) > 1e-9 {
		t.Fatalf("first estimate %v (known %v), want 5/3", got, e.Known())
	}
}

// TestKilledFrontendIsNotCountedTwice: two frontends take 50 QPS each; one is killed and its clients go to the
// other, which now reports 100. The dead one's last rate stops counting once it has missed its reports, so the
// estimate never goes far above the 100 QPS of the load (counted for the whole Silence, it reached 135).
func TestKilledFrontendIsNotCountedTwice(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := time.Second
	e := New(0.3, 5*time.Second)
	at := func(i int) time.Time { return t0.Add(time.Duration(i)*sec + 300*time.Millisecond) }
	for i := 0; i < 20; i++ {
		e.Observe("fe1", 50, sec, at(i))
		e.Observe("fe2", 50, sec, at(i))
		e.Tick(t0.Add(time.Duration(i+1) * sec))
	}
	peak := 0.0
	for i := 20; i < 40; i++ { // fe1 is gone
		e.Observe("fe2", 100, sec, at(i))
		peak = max(peak, e.Tick(t0.Add(time.Duration(i+1)*sec)))
	}
	if peak > 120 {
		t.Fatalf("the estimate reached %.1f QPS after fe1 died, for a load of 100", peak)
	}
	if got := e.Estimate(); math.Abs(got-100) > 1 {
		t.Fatalf("estimate %.1f, want 100", got)
	}
	// A frontend that reports every 10 s counts until it has missed its reports (within Silence).
	e = New(1, 30*time.Second)
	e.Observe("slow", 1000, 10*time.Second, t0)
	if got := e.Tick(t0.Add(20 * time.Second)); got != 100 {
		t.Fatalf("20 s after a 10 s report: %v, want its 100 QPS", got)
	}
}

// TestGraceAfterThePlannersOutage: the planner's own connection is down for 2.3 s, so its frontends' reports could
// not reach it; the two frontends report out of step, and when it is back one's last report is older than its
// missed-report limit and the other's is not. Without grace the estimate took that tick's total, half the load, as
// a drop (in the fault suite: 99 to 80 QPS, a smaller plan, and a late reply 7 s after a NATS restart); with grace
// both count until their next reports.
func TestGraceAfterThePlannersOutage(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := time.Second
	for _, grace := range []bool{false, true} {
		e := New(0.3, 5*time.Second)
		for i := 0; i <= 9; i++ {
			e.Observe("fe1", 50, sec, t0.Add(time.Duration(i)*sec))
			e.Observe("fe2", 50, sec, t0.Add(time.Duration(i)*sec+600*time.Millisecond))
			e.Tick(t0.Add(time.Duration(i)*sec + 800*time.Millisecond))
		}
		back := t0.Add(11800 * time.Millisecond) // cut off from 9.8 s
		if grace {
			e.Grace(back)
		}
		got := e.Tick(back.Add(100 * time.Millisecond))
		switch {
		case grace && got < 99:
			t.Errorf("with grace: estimate %.1f after the outage, want 100 (both frontends' last reports count)", got)
		case !grace && got > 90:
			t.Errorf("without grace: estimate %.1f; the test no longer shows the drop it guards against", got)
		}
	}
}
