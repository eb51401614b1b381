package tuner

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

// detect is one hosted variant: 1 replica serving 40 items/s at batch 8, budget 200 ms.
func detect(replicas int, waiting float64) Variant {
	return Variant{Key: "detect/big", Accuracy: 0.5, Replicas: replicas, MaxBatch: 8, ReplicaQPS: 40,
		Budget: 200 * time.Millisecond, Waiting: waiting}
}

// run feeds the tuner a queue that waiting(t) describes, one look every Every for d, and returns its last loans.
func run(tn *Tuner, in Input, d time.Duration, waiting func(at time.Duration) float64) map[string]int {
	var lent map[string]int
	for at := time.Duration(0); at <= d; at += Every {
		in := in
		in.Variants = []Variant{detect(in.Variants[0].Replicas, waiting(at))}
		lent = tn.Look(t0.Add(at), in)
	}
	return lent
}

func TestTunerLendsOnAGrowingQueueAndGivesBack(t *testing.T) {
	tn := New()
	in := Input{Epoch: 1, Variants: []Variant{detect(1, 0)}, Idle: 10, Covered: false}
	// 200 items/s arrive at a replica that serves 40: the queue grows by 160 a second.
	lent := run(tn, in, time.Second, func(at time.Duration) float64 { return 8 + 160*at.Seconds() })
	if lent["detect/big"] < 4 {
		t.Fatalf("after 1 s of a queue growing by 160/s, lent %v: want at least 4 workers (160/s over 40/s each)", lent)
	}
	if lent["detect/big"] > 10 {
		t.Fatalf("lent %v: more than the 10 idle workers", lent)
	}
	// The queue is cleared, but the plan does not cover the demand: the loans stay.
	lent = run(tn, in, 5*time.Second, func(time.Duration) float64 { return 4 })
	if lent["detect/big"] == 0 {
		t.Fatal("loans ended while the plan does not cover the demand")
	}
	// A plan that covers the demand, and a calm queue for Hold: the loans end.
	in.Covered = true
	if lent = run(tn, in, Hold+Every, func(time.Duration) float64 { return 4 }); len(lent) != 0 {
		t.Fatalf("calm queue for %v under a plan that covers the demand: still lent %v", Hold, lent)
	}
}

func TestTunerLeavesASteadyQueueAlone(t *testing.T) {
	tn := New()
	in := Input{Epoch: 1, Variants: []Variant{detect(2, 0)}, Idle: 10}
	// Two busy replicas with full batches and a few items waiting, up and down: no burst.
	lent := run(tn, in, 30*time.Second, func(at time.Duration) float64 {
		return 16 + float64(int(at/Every)%5)
	})
	if len(lent) != 0 {
		t.Fatalf("a steady queue got loans %v", lent)
	}
}

func TestTunerLendsNoMoreThanIdleAndMostAccurateFirst(t *testing.T) {
	tn := New()
	fast := Variant{Key: "detect/small", Accuracy: 0.3, Replicas: 1, MaxBatch: 8, ReplicaQPS: 100,
		Budget: 100 * time.Millisecond}
	var lent map[string]int
	for at := time.Duration(0); at <= time.Second; at += Every {
		big := detect(1, 8+400*at.Seconds())
		small := fast
		small.Waiting = 8 + 400*at.Seconds()
		lent = tn.Look(t0.Add(at), Input{Epoch: 1, Variants: []Variant{small, big}, Idle: 3})
	}
	if n := lent["detect/big"] + lent["detect/small"]; n != 3 {
		t.Fatalf("lent %v: want all 3 idle workers lent, no more", lent)
	}
	if lent["detect/big"] < lent["detect/small"] {
		t.Fatalf("lent %v: the more accurate variant should be served first", lent)
	}
}

func TestTunerWaitsForALoanToLoad(t *testing.T) {
	tn := New()
	v := detect(1, 0)
	v.Swap = 2 * time.Second
	var first map[string]int
	for at := time.Duration(0); at <= 1500*time.Millisecond; at += Every {
		v.Waiting = 8 + 160*at.Seconds()
		lent := tn.Look(t0.Add(at), Input{Epoch: 1, Variants: []Variant{v}, Idle: 20})
		if first == nil && len(lent) > 0 {
			first = lent
		} else if first != nil && lent["detect/big"] != first["detect/big"] {
			t.Fatalf("lent %v then %v within the model's 2 s load time", first, lent)
		}
	}
	if first == nil {
		t.Fatal("nothing lent")
	}
}

func TestTunerNewPlanKeepsWorkersWhereTheyAre(t *testing.T) {
	tn := New()
	in := Input{Epoch: 1, Variants: []Variant{detect(1, 0)}, Idle: 10}
	lent := run(tn, in, time.Second, func(at time.Duration) float64 { return 8 + 160*at.Seconds() })
	total := 1 + lent["detect/big"]
	// A new plan hosts the variant on 3 replicas: the loans shrink by 2, the variant keeps its workers.
	in2 := Input{Epoch: 2, Variants: []Variant{detect(3, 10)}, Idle: 8}
	got := tn.Look(t0.Add(1100*time.Millisecond), in2)
	if 3+got["detect/big"] != total {
		t.Fatalf("before the new plan %d workers served the variant, after %d (lent %v)", total, 3+got["detect/big"], got)
	}
	// A plan that retires the variant ends its loans.
	if got := tn.Look(t0.Add(1200*time.Millisecond), Input{Epoch: 3, Idle: 10}); len(got) != 0 {
		t.Fatalf("the variant was retired, still lent %v", got)
	}
	// A plan that takes the idle workers ends loans beyond them.
	tn2 := New()
	run(tn2, in, time.Second, func(at time.Duration) float64 { return 8 + 160*at.Seconds() })
	got = tn2.Look(t0.Add(1100*time.Millisecond), Input{Epoch: 1, Variants: []Variant{detect(1, 100)}, Idle: 1})
	if got["detect/big"] > 1 {
		t.Fatalf("1 idle worker left, lent %v", got)
	}
}

// TestTunerLendsOnlyTheVariantsClass: with idle workers per class, a variant in a burst is lent only its own class's
// idle workers, however many another class has.
func TestTunerLendsOnlyTheVariantsClass(t *testing.T) {
	tn := New()
	onFast := Variant{Key: "detect/big@fast", Class: "fast", Accuracy: 0.5, Replicas: 1, MaxBatch: 8, ReplicaQPS: 40,
		Budget: 200 * time.Millisecond}
	onCPU := onFast
	onCPU.Key, onCPU.Class = "detect/big@cpu", "cpu"
	var lent map[string]int
	for at := time.Duration(0); at <= time.Second; at += Every {
		f, c := onFast, onCPU
		f.Waiting, c.Waiting = 8+400*at.Seconds(), 8+400*at.Seconds()
		lent = tn.Look(t0.Add(at), Input{Epoch: 1, Variants: []Variant{f, c}, Idle: 6,
			IdleByClass: map[string]int{"fast": 0, "cpu": 6}})
	}
	if lent["detect/big@fast"] != 0 {
		t.Errorf("lent %v: the fast variant got workers though no fast worker is idle", lent)
	}
	if lent["detect/big@cpu"] == 0 || lent["detect/big@cpu"] > 6 {
		t.Errorf("lent %v: want the cpu variant lent 1-6 of the 6 idle cpu workers", lent)
	}
	// The plan takes the idle cpu workers: the cpu loans end, whatever idles elsewhere.
	c := onCPU
	c.Waiting = 500
	got := tn.Look(t0.Add(1100*time.Millisecond), Input{Epoch: 1, Variants: []Variant{onFast, c}, Idle: 4,
		IdleByClass: map[string]int{"fast": 4, "cpu": 0}})
	if got["detect/big@cpu"] != 0 {
		t.Errorf("no idle cpu worker left, still lent %v", got)
	}
}
