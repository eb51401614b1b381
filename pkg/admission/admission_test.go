package admission

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fifo is a pipeline that takes its requests one at a time, in the order admitted, rate a second, each done floor
// after its admission at the earliest (its hops), and answers as the frontend and workers do: a request whose
// deadline passes before its turn is answered dropped then (nothing run); one done after its deadline is answered
// late then; one done in time is answered when done.
type fifo struct {
	rate     float64
	floor    time.Duration
	deadline time.Duration
	queue    []*queued // not yet on the server
	past     []*queued // past the server, not yet answered
	free     time.Time // when the model is free for the next request
	ceiling  float64   // the plan's CeilingQPS (0: none)
	// fill is a stage after the server that every request spends fill in, however many: the rest of a pipeline
	// after its bottleneck, which a request behind others reaches only once they have left the server. fillKnown
	// says the plan tells the gate (CeilingFillMs).
	fill      time.Duration
	fillKnown bool
	// spread is the most a request's answer comes after its turn on the server and the fill, spread evenly over
	// the requests (a batch's members wait for the batch, and the pipeline's later batches for theirs).
	spread time.Duration
	inTime int // answered in time
	late   int // answered at their deadline, late or dropped
}

type queued struct {
	admitted time.Time
	done     time.Time // when it is done, once past the server
	class    int
	answered bool
}

// answer runs and answers what is due by now, telling g.
func (q *fifo) answer(g *Gate, now time.Time) {
	each := time.Duration(float64(time.Second) / q.rate)
	for len(q.queue) > 0 {
		head := q.queue[0]
		start := later(q.free, head.admitted)
		due := head.admitted.Add(q.deadline)
		if !start.Before(due) { // its deadline passed before its turn: dropped, nothing run
			if !head.answered && !due.After(now) {
				q.expire(g, head, Dropped)
			}
			if !head.answered {
				break
			}
			q.queue = q.queue[1:]
			continue
		}
		if start.After(now) {
			break
		}
		q.free = start.Add(each)
		q.queue = q.queue[1:]
		head.done = later(q.free, head.admitted.Add(q.floor)).Add(q.fill + q.spreadOf(head))
		q.past = append(q.past, head)
	}
	kept := q.past[:0]
	for _, r := range q.past {
		switch due := r.admitted.Add(q.deadline); {
		case r.answered:
		case r.done.After(due):
			if due.After(now) {
				kept = append(kept, r)
				continue
			}
			q.expire(g, r, Late)
		case r.done.After(now):
			kept = append(kept, r)
			continue
		default:
			r.answered = true
			q.inTime++
			g.Done("p", r.admitted, r.done, InTime)
		}
	}
	q.past = kept
	for _, r := range q.queue {
		if !r.answered && !r.admitted.Add(q.deadline).After(now) {
			q.expire(g, r, Late)
		}
	}
}

// spreadOf is r's part of the spread: evenly over [0, spread) by its admission time's hash.
func (q *fifo) spreadOf(r *queued) time.Duration {
	if q.spread <= 0 {
		return 0
	}
	h := uint64(r.admitted.UnixNano()) * 0x9E3779B97F4A7C15
	return time.Duration(float64(h>>11) / (1 << 53) * float64(q.spread))
}

// fillMs is the fill the plan tells the gate, in milliseconds.
func (q *fifo) fillMs() float64 {
	if !q.fillKnown {
		return 0
	}
	return float64(q.fill) / float64(time.Millisecond)
}

func (q *fifo) expire(g *Gate, r *queued, o Outcome) {
	r.answered = true
	q.late++
	g.Done("p", r.admitted, r.admitted.Add(q.deadline), o)
}

// drive sends qps requests a second (classes in turn) into q through g from `from` for d, every 5 ms a tick, and
// counts what was sent and refused per class from `measure` on.
type drive struct {
	sent, refused map[int]int
	reasons       map[string]int
	firstRefusal  time.Duration // from `from` (0: none)
}

func run(g *Gate, q *fifo, qps float64, classes []int, from, to, measure time.Time, each func(now time.Time)) drive {
	out := drive{sent: map[int]int{}, refused: map[int]int{}, reasons: map[string]int{}}
	gap := time.Duration(float64(time.Second) / qps)
	next, i := from, 0
	for now := from; now.Before(to); now = now.Add(time.Millisecond) {
		if each != nil {
			each(now)
		}
		q.answer(g, now)
		for !next.After(now) {
			c := classes[i%len(classes)]
			i++
			d := g.Decide(Request{Pipeline: "p", Class: c, Now: next, Deadline: next.Add(q.deadline)}, Plan{Hosted: true, FastestMs: 10,
				CeilingQPS: q.ceiling, CeilingFillMs: q.fillMs(), Overloaded: qps > q.rate})
			if !next.Before(measure) {
				out.sent[c]++
				if !d.Admit {
					out.refused[c]++
					out.reasons[d.Reason]++
					if out.firstRefusal == 0 {
						out.firstRefusal = next.Sub(from)
					}
				}
			}
			if d.Admit {
				q.queue = append(q.queue, &queued{admitted: next, class: c})
			}
			next = next.Add(gap)
		}
	}
	return out
}

// TestServedLoadRefusesNothing: a pipeline sent 90% of what it answers, with a deadline its work fills most of,
// misses no deadline and so is never bounded, whatever its rate of answers says while it warms up.
func TestServedLoadRefusesNothing(t *testing.T) {
	g := New(Config{})
	q := &fifo{rate: 100, floor: 600 * time.Millisecond, deadline: time.Second}
	d := run(g, q, 90, []int{0}, t0, t0.Add(20*time.Second), t0, nil)
	if d.refused[0] != 0 || q.late != 0 {
		t.Errorf("90%% of the capacity: %d of %d refused, %d late; want none", d.refused[0], d.sent[0], q.late)
	}
}

// TestOverloadAdmitsWhatIsAnsweredInTime: at twice what the pipeline answers, once it has seen its first
// violations (a deadline's worth), it answers nearly all it can in time and almost none of the requests it admits
// late; the rest are refused at once (rate). Without the gate, every request is late once the queue is a deadline
// long.
func TestOverloadAdmitsWhatIsAnsweredInTime(t *testing.T) {
	g := New(Config{})
	q := &fifo{rate: 100, floor: 300 * time.Millisecond, deadline: time.Second}
	run(g, q, 200, []int{0}, t0, t0.Add(5*time.Second), t0, nil)
	q.inTime, q.late = 0, 0
	d := run(g, q, 200, []int{0}, t0.Add(5*time.Second), t0.Add(25*time.Second), t0, nil)
	lateShare := float64(q.late) / float64(q.inTime+q.late)
	t.Logf("20 s at 200/s: %d answered in time, %d late or dropped, %d refused %v", q.inTime, q.late, d.refused[0],
		d.reasons)
	if q.inTime < 1900 || lateShare > 0.01 || d.reasons[ReasonRate] != d.refused[0] {
		t.Errorf("%d answered in time (want at least 1,900 of the 2,000 it can), %.2f%% of the admitted late or "+
			"dropped (want under 1%%), refusals %v (want all for the rate)", q.inTime, 100*lateShare, d.reasons)
	}
}

// TestOverrunSeenAtTheFirstAnswers: a cold start at sixteen times what the pipeline answers. The first answers
// show the requests in flight to be many deadlines' worth, and the pipeline is congested then, before any answer is
// late; without the overrun (a factor no load reaches) it is congested only at the first late answers, a deadline
// on, and more than four times as many of the requests it admits are late.
func TestOverrunSeenAtTheFirstAnswers(t *testing.T) {
	late := map[float64]int{}
	for _, factor := range []float64{0, 1e9} {
		g := New(Config{OverrunFactor: factor})
		q := &fifo{rate: 100, floor: 50 * time.Millisecond, deadline: 600 * time.Millisecond}
		first := time.Duration(0)
		run(g, q, 1600, []int{0}, t0, t0.Add(5*time.Second), t0, func(now time.Time) {
			if first == 0 && g.Congested("p", now) {
				first = now.Sub(t0)
			}
		})
		t.Logf("factor %g: congested at %v; %d in time, %d late or dropped", factor, first, q.inTime, q.late)
		late[factor] = q.late
		if factor == 0 && (first == 0 || first > 200*time.Millisecond) {
			t.Errorf("congested at %v, want within 200 ms of the load (the first answers, before any is late)", first)
		}
	}
	if late[0]*4 > late[1e9] {
		t.Errorf("%d late or dropped with the overrun, %d without: want under a quarter", late[0], late[1e9])
	}
}

// TestBoundFollowsAGrownCluster: overloaded at 100 answers a second, the pipeline doubles (the tuner lent it
// workers): within half a second it is admitted, and answers in time, about twice as many, with none late; and
// when the demand falls under what it answers, nothing is refused within a RateWindow and a bit.
func TestBoundFollowsAGrownCluster(t *testing.T) {
	g := New(Config{})
	q := &fifo{rate: 100, floor: 200 * time.Millisecond, deadline: time.Second}
	run(g, q, 300, []int{0}, t0, t0.Add(10*time.Second), t0, nil)
	grown := t0.Add(10 * time.Second)
	q.rate, q.inTime, q.late = 200, 0, 0
	run(g, q, 300, []int{0}, grown, grown.Add(500*time.Millisecond), grown, nil)
	q.inTime, q.late = 0, 0
	run(g, q, 300, []int{0}, grown.Add(500*time.Millisecond), grown.Add(2500*time.Millisecond), grown, nil)
	if q.inTime < 380 || q.late > 4 {
		t.Errorf("from 0.5 s after the pipeline doubled, 2 s: %d answered in time, %d late; want at least 380 of "+
			"the 400 it answers, at most 4 late", q.inTime, q.late)
	}
	fell := grown.Add(2500 * time.Millisecond)
	d := run(g, q, 150, []int{0}, fell, fell.Add(5*time.Second), fell.Add(DefaultRateWindow+100*time.Millisecond), nil)
	if d.refused[0] > 0 {
		t.Errorf("at 150/s on a pipeline that answers 200: %d refused from %v after the fall, want none",
			d.refused[0], DefaultRateWindow+100*time.Millisecond)
	}
}

// TestHigherClassesFirst: overloaded twice over, class 7 (a third of the requests, two thirds of what the pipeline
// answers) is admitted nearly whole, class 2 gets what is left.
func TestHigherClassesFirst(t *testing.T) {
	g := New(Config{})
	q := &fifo{rate: 100, floor: 200 * time.Millisecond, deadline: time.Second}
	classes := []int{7, 2, 2}
	run(g, q, 200, classes, t0, t0.Add(5*time.Second), t0, nil)
	d := run(g, q, 200, classes, t0.Add(5*time.Second), t0.Add(25*time.Second), t0, nil)
	share := func(c int) float64 { return 1 - float64(d.refused[c])/float64(d.sent[c]) }
	t.Logf("admitted: class 7 %.3f, class 2 %.3f; %d in time, %d late", share(7), share(2), q.inTime, q.late)
	if share(7) < 0.9 || share(2) > 0.45 || share(2) < 0.1 {
		t.Errorf("admitted: class 7 %.3f (want at least 0.9), class 2 %.3f (want what is left: 0.1 to 0.45)",
			share(7), share(2))
	}
}

// TestDeadlineNearerThanTheFastestPath is refused whatever the load.
func TestDeadlineNearerThanTheFastestPath(t *testing.T) {
	g := New(Config{})
	p := Plan{Hosted: true, FastestMs: 100}
	d := g.Decide(Request{Pipeline: "p", Now: t0, Deadline: t0.Add(60 * time.Millisecond)}, p)
	if d.Admit || d.Reason != ReasonDeadline || !strings.Contains(d.Detail, "fastest path") {
		t.Errorf("a 60 ms deadline on a 100 ms fastest path: %+v, want refused (deadline)", d)
	}
	if d := g.Decide(Request{Pipeline: "p", Now: t0, Deadline: t0.Add(150 * time.Millisecond)}, p); !d.Admit {
		t.Errorf("a 150 ms deadline on a 100 ms fastest path: %+v, want admitted", d)
	}
	if g.InFlight("p") != 1 {
		t.Errorf("in flight %d, want the one admitted", g.InFlight("p"))
	}
}

// TestOutcomeOf: the reply statuses as the gate learns from them.
func TestOutcomeOf(t *testing.T) {
	for status, want := range map[string]Outcome{wire.StatusOK: InTime, wire.StatusLate: Late,
		wire.StatusPartial: Late, wire.StatusDegraded: Late, wire.StatusDropped: Dropped, "": Withdrawn,
		wire.StatusError: Withdrawn} {
		if got := OutcomeOf(status); got != want {
			t.Errorf("OutcomeOf(%q) = %d, want %d", status, got, want)
		}
	}
}

// TestOfTraffic: the fastest path of a plan hosting every variant of traffic is yolov5n, then the slower of
// effnet_b0 and mobilefacenet at batch 1, with a hop's communication latency each.
func TestOfTraffic(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{Allocation: &plan.Allocation{ServedQPS: 700, DemandQPS: 1500, EstimateQPS: 1400}}
	want := 0.0
	for _, chain := range spec.Chains() {
		ms := 0.0
		for _, task := range chain {
			fastest := math.Inf(1)
			for i := range spec.Task(task).Variants {
				v := &spec.Task(task).Variants[i]
				p.Variants = append(p.Variants, plan.NewVariantPlan(task, v, 1, 1))
				fastest = min(fastest, v.LatencyFor(1).P50Ms)
			}
			ms += fastest + spec.CommLatencyMs
		}
		want = max(want, ms)
	}
	if got := Of(spec, p, 0); !near(got.FastestMs, want, 1e-9) || !got.Hosted {
		t.Errorf("Of = %+v, want fastest %.1f ms, every task hosted", got, want)
	}
	// Without the face recogniser: a task unhosted, every request refused at once.
	var partial plan.Plan
	for _, vp := range p.Variants {
		if vp.Task != "recognize_face" {
			partial.Variants = append(partial.Variants, vp)
		}
	}
	got := Of(spec, &partial, 0)
	if got.Hosted {
		t.Fatalf("Of without recognize_face: %+v, want not hosted", got)
	}
	if d := New(Config{}).Decide(Request{Pipeline: "traffic", Now: t0, Deadline: t0.Add(time.Second)}, got); d.Admit ||
		d.Reason != ReasonUnhosted || !strings.Contains(d.Detail, "no server for task recognize_face") {
		t.Errorf("a plan that hosts no recognize_face: %+v, want refused (unhosted)", d)
	}
	if want < 20 {
		t.Errorf("fastest path %.1f ms: yolov5n alone takes 20", want)
	}
}

// TestFloorShortfall: under a plan that serves 60% of the demand at the accuracy floor, the gate admits 60% of the
// requests, evenly, and the higher class first: with 30% of the arrivals in class 1, all of them (once the counts
// show the classes' shares), and 3/7 of class 0's. A plan without a shortfall refuses none.
func TestFloorShortfall(t *testing.T) {
	g := New(Config{})
	p := Plan{Hosted: true, FloorShortfall: 0.4}
	admitted := map[int]int{}
	sent := map[int]int{}
	for i := range 10000 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		class := 0
		if i%10 < 3 {
			class = 1
		}
		sent[class]++
		d := g.Decide(Request{Pipeline: "p", Class: class, Now: now, Deadline: now.Add(time.Second)}, p)
		if d.Admit {
			admitted[class]++
			g.Done("p", now, now, InTime)
		} else if d.Reason != ReasonAccuracy {
			t.Fatalf("refused for %q: %s", d.Reason, d.Detail)
		}
	}
	if got := float64(admitted[0]+admitted[1]) / 10000; !near(got, 0.6, 0.01) {
		t.Errorf("admitted %.3f of the requests, want 0.6", got)
	}
	if admitted[1] < sent[1]-5 { // all but the first few, before the arrival counts show the classes' shares
		t.Errorf("class 1: %d of %d admitted, want all", admitted[1], sent[1])
	}
	if got := float64(admitted[0]) / float64(sent[0]); !near(got, 3.0/7, 0.01) {
		t.Errorf("class 0: %.3f admitted, want 3/7", got)
	}
	p.FloorShortfall = 0
	now := t0.Add(time.Minute)
	for i := range 100 {
		at := now.Add(time.Duration(i) * time.Millisecond)
		if d := g.Decide(Request{Pipeline: "p", Now: at, Deadline: at.Add(time.Second)}, p); !d.Admit {
			t.Fatalf("no shortfall: refused (%s)", d.Detail)
		}
		g.Done("p", at, at, InTime)
	}
}

// TestOfFloorShortfall: a plan overloaded at its floor gives the gate its shortfall and says it is overloaded; one in
// hardware mode neither.
func TestOfFloorShortfall(t *testing.T) {
	spec := &pipeline.Spec{Name: "p", Tasks: []pipeline.Task{{Name: "a", Variants: []pipeline.Variant{{Name: "v",
		Profile: []pipeline.ProfilePoint{{Batch: 1, P50Ms: 10, P95Ms: 12}}}}}}}
	p := &plan.Plan{Pipeline: "p", Mode: plan.ModeOverloaded, Variants: []plan.VariantPlan{{Task: "a", Variant: "v",
		Replicas: 1, MaxBatch: 1}}, Allocation: &plan.Allocation{DemandQPS: 100, ServedQPS: 75, MinAccuracy: 0.5}}
	if got := Of(spec, p, 0); !near(got.FloorShortfall, 0.25, 1e-12) || !got.Overloaded {
		t.Errorf("shortfall %v, overloaded %v; want 0.25, true", got.FloorShortfall, got.Overloaded)
	}
	p.Mode = plan.ModeHardware
	if got := Of(spec, p, 0); got.FloorShortfall != 0 || got.Overloaded {
		t.Errorf("hardware mode: shortfall %v, overloaded %v; want 0, false", got.FloorShortfall, got.Overloaded)
	}
}

// TestCongested: a pipeline is congested from the answers that show violations until the bound has refused nothing
// for a RateWindow.
func TestCongested(t *testing.T) {
	g := New(Config{})
	now := time.Unix(1000, 0)
	if g.Congested("p", now) {
		t.Fatal("a pipeline never seen is congested")
	}
	for range 10 {
		g.Decide(Request{Pipeline: "p", Now: now, Deadline: now.Add(time.Second)}, Plan{Hosted: true})
		g.Done("p", now, now, Late)
	}
	if !g.Congested("p", now) {
		t.Fatal("10 late answers of 10: not congested")
	}
	if later := now.Add(DefaultRateWindow + time.Millisecond); g.Congested("p", later) {
		t.Fatal("congested a RateWindow after the bound last refused")
	}
}
