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
			g.Done("p", now)
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

// TestQueueAheadBoundsTheBacklog: requests come at 200/s and are answered at 100/s, from a FIFO with no other bound;
// once a window has passed, the gate refuses what would wait past 0.75 of its 1 s deadline behind the work in
// flight, so that the backlog stays near 75 (0.75 s of answers), where without the rule it would grow to 1,000.
func TestQueueAheadBoundsTheBacklog(t *testing.T) {
	g := New(Config{})
	var queue []time.Time
	refused, maxBacklog := 0, 0
	next := t0
	for now := t0; now.Before(t0.Add(10 * time.Second)); now = now.Add(5 * time.Millisecond) {
		for len(queue) > 0 && !next.After(now) {
			queue = queue[1:]
			g.Done("p", next)
			next = next.Add(10 * time.Millisecond)
		}
		if len(queue) == 0 {
			next = now.Add(10 * time.Millisecond)
		}
		d := g.Decide(Request{Pipeline: "p", Now: now, Deadline: now.Add(time.Second)}, Plan{FastestMs: 10})
		if !d.Admit {
			refused++
			if d.Reason != ReasonDeadline {
				t.Fatalf("refusal %+v, want for the deadline", d)
			}
			continue
		}
		queue = append(queue, now)
		if now.After(t0.Add(3 * time.Second)) {
			maxBacklog = max(maxBacklog, len(queue))
		}
	}
	if maxBacklog < 60 || maxBacklog > 110 {
		t.Errorf("backlog reached %d (refused %d), want about 75: 0.75 s of answers at 100/s", maxBacklog, refused)
	}
	if g.InFlight("p") != len(queue) {
		t.Errorf("gate holds %d in flight, the queue %d", g.InFlight("p"), len(queue))
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
