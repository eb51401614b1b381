// Package tuner follows the demand between plans. The planner solves the allocation every few seconds from a
// smoothed demand estimate; a burst, a step or a cold start outruns that by seconds. Every Every (100 ms) the tuner
// looks at each hosted variant's queue and, when it grows faster than the variant's replicas can clear within their
// budget, lends the pipeline's idle workers to it at once, at the plan's batch size; it takes them back when the
// burst has passed and the plan covers the demand again (InferLine's high-frequency tuner, on queues rather than
// traffic envelopes). Pure: the planner service and the simulator call it with what they observe, and time passed in.
//
// The rule, per hosted variant v with r replicas (the plan's and those lent), each serving mu items per second at
// the plan's batch size b, with budget B (its profiled latency at b, stretched by the plan's budget scale):
//
//   - backlog = waiting - r*b: the items beyond what its replicas hold in service;
//   - growth = the largest rise per second of what waits over the last 0.5, 1 and 2 s (0 when it fell);
//   - it is in a burst when backlog > r*mu*B: the replicas cannot clear what waits within one budget, so every
//     item that arrives now is late; Poisson noise at the routing's 85% utilisation almost never gets there;
//   - it then needs ceil((r*mu + growth + backlog/Drain) / (mu*U)) replicas in all: its busy replicas' rate plus the
//     growth is what arrives, and the backlog is to be cleared within Drain (1 s), at the routing's utilisation U
//     (0.85), as the plan would size them; the difference is lent from the idle workers, most accurate variants
//     first; a variant just lent
//     workers gets no more until they have loaded its model (its swap time) and a look has seen them serve;
//   - loans are taken back, all at once, when the variant has had no backlog for Hold (2 s) and the plan covers the
//     demand estimate (a new plan sized for the burst, or a burst that passed). A new plan keeps each variant's
//     workers as they were: its loans shrink by the replicas the plan added (ending when the plan hosts as many as
//     the loans gave it), and a plan that retires the variant ends them.
package tuner

import (
	"maps"
	"math"
	"slices"
	"sort"
	"time"
)

// Defaults.
const (
	// Every is how often the planner looks: a burst is met within a look and a worker's model load. Looks every
	// 250 ms left the first 0.6 s of a cold start to one replica (the first look came before the queue showed, the
	// second waited for a plan being published): 0.7-1.1% of 20 s at 200 QPS missed their deadlines, against
	// 0-0.1% with looks every 100 ms (docs/adaptation.md). A look costs the planner one JetStream request per pipeline.
	Every = 100 * time.Millisecond
	// Drain is how fast lent replicas are sized to clear a backlog.
	Drain = time.Second
	// Hold is how long a variant must have had no backlog before its loans end.
	Hold = 2 * time.Second
)

// windows are the spans over which the growth of a queue is measured: the shortest sees a step within a look or
// two, the longest does not miss a slow climb.
var windows = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}

// Variant is one hosted variant at a look.
type Variant struct {
	Key      string // "task/variant"
	Accuracy float64
	// Replicas is how many the plan hosts (not counting loans); MaxBatch its batch size.
	Replicas int
	MaxBatch int
	// ReplicaQPS is the items per second one replica serves at MaxBatch.
	ReplicaQPS float64
	// Budget is its latency budget at MaxBatch; Swap how long a worker takes to load it.
	Budget, Swap time.Duration
	// Class is the server class it runs on (wire.ClassOf): it is lent only idle workers of that class.
	Class string
	// Waiting is the items waiting in its queue or in service.
	Waiting float64
}

// Input is what the tuner sees of one pipeline at a look.
type Input struct {
	// Epoch of the plan in force: a new one re-examines every loan.
	Epoch uint64
	// Variants are the plan's hosted variants.
	Variants []Variant
	// Idle is how many of the pipeline's workers the plan leaves without a replica: the most that may be lent.
	Idle int
	// IdleByClass, when set, is Idle per server class: a variant is lent only idle workers of its own class
	// (Variant.Class), which alone can host it.
	IdleByClass map[string]int
	// Covered says the plan in force was sized for at least the demand estimate: loans may end.
	Covered bool
	// Utilization is the share of a replica's capacity that lent replicas are sized to use (0: 0.85).
	Utilization float64
}

// Tuner is one pipeline's tuner. Not safe for concurrent use.
type Tuner struct {
	lent     map[string]int
	replicas map[string]int // the plan's replicas at the previous look
	history  map[string][]sample
	calm     map[string]time.Time // since when a variant has had no backlog
	lentAt   map[string]time.Time // when a variant was last lent workers
	epoch    uint64
}

type sample struct {
	at      time.Time
	waiting float64
}

// New returns a tuner with nothing lent.
func New() *Tuner {
	return &Tuner{lent: map[string]int{}, replicas: map[string]int{}, history: map[string][]sample{},
		calm: map[string]time.Time{}, lentAt: map[string]time.Time{}}
}

// Lent is how many workers each variant has on loan ("task/variant" -> workers; variants with none are absent).
func (t *Tuner) Lent() map[string]int {
	out := make(map[string]int, len(t.lent))
	for h, n := range t.lent {
		out[h] = n
	}
	return out
}

// Look takes one look at the queues at now and returns the loans that should be in force: how many idle workers
// each variant has on top of the plan's replicas.
func (t *Tuner) Look(now time.Time, in Input) map[string]int {
	t.look(now, in)
	return t.Lent()
}

// LookSince is Look for a caller that holds the loans prev: it says whether they changed, and copies them only
// then (the caller looks ten times a second, and the loans seldom change).
func (t *Tuner) LookSince(now time.Time, in Input, prev map[string]int) (lent map[string]int, changed bool) {
	t.look(now, in)
	if maps.Equal(t.lent, prev) {
		return prev, false
	}
	return t.Lent(), true
}

func (t *Tuner) look(now time.Time, in Input) {
	for _, v := range in.Variants {
		t.record(now, v)
	}
	t.followPlan(in)
	wants := t.wants(now, in)
	if len(t.lent) == 0 && len(wants) == 0 {
		return // nothing lent, nothing to lend
	}
	var classOf map[string]string // by key; "" for every variant without IdleByClass (nil then)
	if in.IdleByClass != nil {
		classOf = make(map[string]string, len(in.Variants))
		for _, v := range in.Variants {
			classOf[v.Key] = v.Class
		}
	}
	idle := func(class string) int {
		if in.IdleByClass == nil {
			return in.Idle
		}
		return in.IdleByClass[class]
	}
	lentIn := map[string]int{}
	for h, n := range t.lent {
		lentIn[classOf[h]] += n
	}
	// A plan that grew into the idle workers leaves fewer to lend: loans beyond them end, the largest first.
	for class, n := range lentIn {
		for ; n > idle(class); n-- {
			h := t.largestLoan(func(h string) bool { return classOf[h] == class })
			t.lent[h]--
			if t.lent[h] == 0 {
				delete(t.lent, h)
			}
		}
		lentIn[class] = n
	}
	if len(wants) > 1 {
		sort.SliceStable(wants, func(i, j int) bool { return wants[i].accuracy > wants[j].accuracy })
	}
	for _, w := range wants {
		class := classOf[w.key]
		n := min(w.more, idle(class)-lentIn[class])
		if n <= 0 {
			continue // another class may still have idle workers
		}
		t.lent[w.key] += n
		t.lentAt[w.key] = now
		lentIn[class] += n
	}
}

// followPlan takes in the plan in force: under a new plan, the workers lent stay where they are and the plan's new
// replicas end loans; a variant the plan retired takes its lent workers back with its replicas.
func (t *Tuner) followPlan(in Input) {
	newPlan := in.Epoch != t.epoch
	t.epoch = in.Epoch
	for _, v := range in.Variants {
		if newPlan && t.lent[v.Key] > 0 { // the workers stay where they are: the plan's new replicas end loans
			if n := t.replicas[v.Key] + t.lent[v.Key] - v.Replicas; n > 0 {
				t.lent[v.Key] = n
			} else {
				delete(t.lent, v.Key)
			}
		}
		t.replicas[v.Key] = v.Replicas
	}
	for h := range t.history {
		if !slices.ContainsFunc(in.Variants, func(v Variant) bool { return v.Key == h }) {
			// a new plan retired it: its lent workers go back with its replicas
			delete(t.lent, h)
			delete(t.replicas, h)
			delete(t.history, h)
			delete(t.calm, h)
			delete(t.lentAt, h)
		}
	}
}

// loanWant is how many more workers a variant wants.
type loanWant struct {
	key      string
	accuracy float64
	more     int
}

// wants are the variants whose queues outgrow their replicas and lent workers, with how many more workers they
// want (loans of variants calm for Hold while the plan covers the demand end).
func (t *Tuner) wants(now time.Time, in Input) (wants []loanWant) {
	for _, v := range in.Variants {
		if v.Replicas <= 0 || v.ReplicaQPS <= 0 || v.MaxBatch <= 0 {
			continue
		}
		r := v.Replicas + t.lent[v.Key]
		backlog := v.Waiting - float64(r*v.MaxBatch)
		if backlog > 0 {
			delete(t.calm, v.Key)
		} else if _, ok := t.calm[v.Key]; !ok {
			t.calm[v.Key] = now
		}
		switch {
		case backlog > float64(r)*v.ReplicaQPS*v.Budget.Seconds():
			if at, ok := t.lentAt[v.Key]; ok && now.Sub(at) < v.Swap+Every {
				break // the last loan is still loading
			}
			u := in.Utilization
			if u <= 0 || u > 1 {
				u = 0.85
			}
			arriving := float64(r)*v.ReplicaQPS + t.growth(v.Key, now)
			more := int(math.Ceil((arriving+backlog/Drain.Seconds())/(v.ReplicaQPS*u))) - r
			if more > 0 {
				wants = append(wants, loanWant{v.Key, v.Accuracy, more})
			}
		case t.lent[v.Key] > 0 && in.Covered && backlog <= 0 && now.Sub(t.calm[v.Key]) >= Hold:
			delete(t.lent, v.Key)
		}
	}
	return wants
}

// record keeps the last samples of what waits at v, as far back as the longest window.
func (t *Tuner) record(now time.Time, v Variant) {
	h := append(t.history[v.Key], sample{now, v.Waiting})
	keep := 0
	for keep < len(h)-1 && now.Sub(h[keep+1].at) >= windows[len(windows)-1] {
		keep++
	}
	if keep > 0 { // (a copy of the history onto itself was a write barrier per sample under the collector)
		h = append(h[:0], h[keep:]...)
	}
	t.history[v.Key] = h
}

// growth is the largest rise per second of what waits at key over the windows (0 when it fell over all of them).
// A window the history does not span yet uses what it has.
func (t *Tuner) growth(key string, now time.Time) float64 {
	h := t.history[key]
	if len(h) < 2 {
		return 0
	}
	last := h[len(h)-1]
	best := 0.0
	for _, w := range windows {
		i := len(h) - 2
		for i > 0 && now.Sub(h[i].at) < w {
			i--
		}
		if d := last.at.Sub(h[i].at).Seconds(); d > 0 {
			best = max(best, (last.waiting-h[i].waiting)/d)
		}
	}
	return best
}

// largestLoan is the largest loan among the variants in (ties: the last key).
func (t *Tuner) largestLoan(in func(string) bool) string {
	best, n := "", 0
	for h, l := range t.lent {
		if !in(h) {
			continue
		}
		if l > n || l == n && h > best {
			best, n = h, l
		}
	}
	return best
}
