package admission

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// arrivals drives g with qps requests a second of the given classes (in turn) for d, each answered at once when
// admitted, and returns how many of each class were sent and admitted, and the refusals by reason.
func arrivals(g *Gate, p Plan, qps float64, classes []int, d time.Duration, seed uint64) (sent, admitted map[int]int, reasons map[string]int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	sent, admitted, reasons = map[int]int{}, map[int]int{}, map[string]int{}
	step := time.Duration(float64(time.Second) / qps)
	for i, now := 0, t0; now.Before(t0.Add(d)); i, now = i+1, now.Add(step) {
		c := classes[i%len(classes)]
		sent[c]++
		dec := g.Decide(Request{Pipeline: "p", Class: c, Now: now, Deadline: now.Add(time.Second), U: rng.Float64()}, p)
		if dec.Admit {
			admitted[c]++
			g.Done("p", now, now, false)
		} else {
			reasons[dec.Reason]++
		}
	}
	return sent, admitted, reasons
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// TestRateAdmitsTheServedShare: a plan that serves half the estimate admits half of every frontend's requests, and a
// plan that serves all of it admits every one.
func TestRateAdmitsTheServedShare(t *testing.T) {
	for _, tc := range []struct {
		name          string
		served, est   float64
		wantAdmitted  float64
		wantRefusedBy string
	}{
		{"overloaded: half served", 500, 1000, 0.5, ReasonRate},
		{"served with headroom", 1200, 1000, 1, ""},
		{"static plan: no rate rule", 0, 0, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent, admitted, reasons := arrivals(New(Config{}), Plan{ServedQPS: tc.served, EstimateQPS: tc.est}, 1000,
				[]int{0}, 10*time.Second, 1)
			got := float64(admitted[0]) / float64(sent[0])
			if !near(got, tc.wantAdmitted, 0.02) {
				t.Errorf("admitted %.3f of the requests, want %.3f", got, tc.wantAdmitted)
			}
			if tc.wantRefusedBy != "" && reasons[tc.wantRefusedBy] != sent[0]-admitted[0] {
				t.Errorf("refusals %v, want all %s", reasons, tc.wantRefusedBy)
			}
		})
	}
}

// TestFrontendsShareInProportion: two frontends that see 300 and 700 of the 1,000 requests a second the plan serves
// 500 of admit 150 and 350: their shares of the served rate, with no word between them.
func TestFrontendsShareInProportion(t *testing.T) {
	p := Plan{ServedQPS: 500, EstimateQPS: 1000}
	total := 0.0
	for i, qps := range []float64{300, 700} {
		sent, admitted, _ := arrivals(New(Config{}), p, qps, []int{0}, 20*time.Second, uint64(i+7))
		rate := float64(admitted[0]) / 20
		if !near(rate, qps/2, 0.04*qps) {
			t.Errorf("frontend seeing %.0f/s admitted %.1f/s (%d of %d), want %.0f/s", qps, rate, admitted[0], sent[0], qps/2)
		}
		total += rate
	}
	if !near(total, 500, 20) {
		t.Errorf("frontends admitted %.1f/s in all, want the 500/s the plan serves", total)
	}
}

// TestHigherClassesFirst: the frontend's share goes to the highest class first, the rest to the next.
func TestHigherClassesFirst(t *testing.T) {
	// Class 7 is 3 requests in 10, class 2 the other 7.
	classes := []int{7, 2, 2, 7, 2, 2, 7, 2, 2, 2}
	for _, tc := range []struct {
		fraction     float64
		want7, want2 float64
	}{
		{0.5, 1, (0.5 - 0.3) / 0.7},
		{0.2, 0.2 / 0.3, 0},
		{1, 1, 1},
	} {
		sent, admitted, _ := arrivals(New(Config{}), Plan{ServedQPS: 1000 * tc.fraction, EstimateQPS: 1000}, 1000,
			classes, 10*time.Second, 3)
		got7, got2 := float64(admitted[7])/float64(sent[7]), float64(admitted[2])/float64(sent[2])
		if !near(got7, tc.want7, 0.03) || !near(got2, tc.want2, 0.03) {
			t.Errorf("served fraction %.1f: class 7 admitted %.3f, class 2 %.3f; want %.3f and %.3f", tc.fraction,
				got7, got2, tc.want7, tc.want2)
		}
	}
}

// TestDeadlineNearerThanTheFastestPath is refused whatever the load.
func TestDeadlineNearerThanTheFastestPath(t *testing.T) {
	g := New(Config{})
	p := Plan{FastestMs: 100}
	d := g.Decide(Request{Pipeline: "p", Now: t0, Deadline: t0.Add(60 * time.Millisecond)}, p)
	if d.Admit || d.Reason != ReasonDeadline || !strings.Contains(d.Detail, "fastest path") {
		t.Errorf("a 60 ms deadline on a 100 ms fastest path: %+v, want refused (deadline)", d)
	}
	if d := g.Decide(Request{Pipeline: "p", Now: t0, Deadline: t0.Add(150 * time.Millisecond)}, p); !d.Admit {
		t.Errorf("a 150 ms deadline on a 100 ms fastest path: %+v, want admitted", d)
	}
}

// fifo is a pipeline that takes its requests one at a time, in the order admitted, rate a second, each done floor
// after its admission at the earliest (its hops), and answers as the frontend and workers do: a request whose
// deadline passes is answered late then (and its work, when its turn comes, is dropped unexecuted); one executed in
// time is answered when done.
type fifo struct {
	rate     float64
	floor    time.Duration
	deadline time.Duration
	queue    []*queued
	free     time.Time // when the model is free for the next request
	inTime   int       // answered in time
	late     int       // answered at their deadline
}

type queued struct {
	admitted time.Time
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
				q.expire(g, head)
			}
			if !head.answered {
				break
			}
			q.queue = q.queue[1:]
			continue
		}
		done := later(start.Add(each), head.admitted.Add(q.floor))
		if done.After(now) || done.After(due) && !head.answered && due.After(now) {
			break
		}
		q.free = start.Add(each)
		q.queue = q.queue[1:]
		if done.After(due) {
			if !head.answered {
				q.expire(g, head)
			}
			continue
		}
		q.inTime++
		g.Done("p", head.admitted, done, false)
	}
	for _, r := range q.queue {
		if !r.answered && !r.admitted.Add(q.deadline).After(now) {
			q.expire(g, r)
		}
	}
}

func (q *fifo) expire(g *Gate, r *queued) {
	r.answered = true
	q.late++
	g.Done("p", r.admitted, r.admitted.Add(q.deadline), true)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestQueueAheadBoundsTheBacklog: requests come at twice the rate a FIFO answers them (100/s), each with 1 s to its
// deadline, under a plan that claims to serve them all (no rate rule). The gate refuses, for the deadline, what would
// wait past it: once it has learned the pipeline (5 s), the backlog stays under a second of answers, the FIFO answers
// about as many as it can, and nearly every request admitted is answered in time. Without the rule the backlog grows
// without bound, every request late.
func TestQueueAheadBoundsTheBacklog(t *testing.T) {
	g := New(Config{})
	const d = time.Second
	q := &fifo{rate: 100, deadline: d}
	refused, maxBacklog := 0, 0
	for now := t0; now.Before(t0.Add(20 * time.Second)); now = now.Add(5 * time.Millisecond) {
		if now.Equal(t0.Add(5 * time.Second)) {
			q.inTime, q.late, refused = 0, 0, 0 // learned: measure from here
		}
		q.answer(g, now)
		dec := g.Decide(Request{Pipeline: "p", Now: now, Deadline: now.Add(d)}, Plan{FastestMs: 10})
		if !dec.Admit {
			refused++
			if dec.Reason != ReasonDeadline {
				t.Fatalf("refusal %+v, want for the deadline", dec)
			}
			continue
		}
		q.queue = append(q.queue, &queued{admitted: now})
		if now.After(t0.Add(5 * time.Second)) {
			maxBacklog = max(maxBacklog, len(q.queue))
		}
	}
	lateShare := float64(q.late) / float64(q.inTime+q.late)
	t.Logf("answered %d in time, %d late; refused %d; backlog at most %d", q.inTime, q.late, refused, maxBacklog)
	// Under 3% late: the limit is cut only beyond DefaultTarget (3%) of violations, and settles near it; the rule of
	// the work ahead refuses only beyond DefaultQueueShare (3) times the time left (docs/admission.md).
	if maxBacklog > 110 || q.inTime < 1350 || lateShare > 0.03 {
		t.Errorf("backlog reached %d, %d answered in time and %.1f%% late (refused %d): want a backlog within the "+
			"deadline's 100 answers, at least 1,350 of the 1,500 the FIFO can answer in 15 s, under 3%% late",
			maxBacklog, q.inTime, 100*lateShare, refused)
	}
	// A request with less time than the work ahead takes (about 0.9 s) is refused, though the limit has room.
	now := t0.Add(20 * time.Second)
	for _, r := range q.queue {
		if !r.answered { // answered now: a place under the limit
			r.answered = true
			g.Done("p", r.admitted, now, false)
			break
		}
	}
	dec := g.Decide(Request{Pipeline: "p", Now: now, Deadline: now.Add(300 * time.Millisecond)}, Plan{FastestMs: 10})
	if dec.Admit || !strings.Contains(dec.Detail, "requests ahead") {
		t.Errorf("a 300 ms deadline behind about 0.9 s of work: %+v, want refused for the work ahead", dec)
	}
	unanswered := 0
	for _, r := range q.queue {
		if !r.answered {
			unanswered++
		}
	}
	if g.InFlight("p") != unanswered {
		t.Errorf("gate holds %d in flight, the pipeline %d unanswered", g.InFlight("p"), unanswered)
	}
}

// TestOfTraffic: the fastest path of a plan hosting every variant of traffic is yolov5n, then the slower of
// effnet_b0 and mobilefacenet at batch 1, with a hop's communication latency each; the allocation's rates.
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
	got := Of(spec, p)
	if !near(got.FastestMs, want, 1e-9) || got.ServedQPS != 700 || got.EstimateQPS != 1400 || got.Fraction() != 0.5 {
		t.Errorf("Of = %+v, want fastest %.1f ms, 700 of 1400 served", got, want)
	}
	if want < 20 {
		t.Errorf("fastest path %.1f ms: yolov5n alone takes 20", want)
	}
}

// TestLimitCatchesUpWithAGrownCluster: the pipeline takes 20 requests a second for 3 s (a cold plan), then 100 (the
// plan grew), each done half a second after its admission at the earliest, with requests coming at 200/s: the limit
// cut while it was small catches up (the pipeline answers no more than the limit allows: limit / 0.5 s), and from
// 15 s on the pipeline answers in time nearly all it can, with one overshoot when the limit first finds the grown
// pipeline's capacity (a few percent late). Without the acceleration it answers half as many.
func TestLimitCatchesUpWithAGrownCluster(t *testing.T) {
	g := New(Config{})
	q := &fifo{rate: 20, floor: 800 * time.Millisecond, deadline: time.Second}
	for now := t0; now.Before(t0.Add(25 * time.Second)); now = now.Add(5 * time.Millisecond) {
		switch {
		case now.Equal(t0.Add(3 * time.Second)):
			q.rate = 100
		case now.Equal(t0.Add(15 * time.Second)):
			q.inTime, q.late = 0, 0
		}
		q.answer(g, now)
		if g.Decide(Request{Pipeline: "p", Now: now, Deadline: now.Add(time.Second)}, Plan{FastestMs: 10}).Admit {
			q.queue = append(q.queue, &queued{admitted: now})
		}
	}
	if q.inTime < 850 || float64(q.late) > 0.04*float64(q.inTime+q.late) {
		t.Errorf("from 15 s to 25 s: %d answered in time, %d late; want at least 850 of the 1,000 the pipeline "+
			"answers, under 4%% late", q.inTime, q.late)
	}
}
