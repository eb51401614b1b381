package demand

import (
	"maps"
	"math"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Counters folds the cumulative counters workers report with every heartbeat (wire.Registration.Observed, per
// "pipeline:task/variant") into what each counted since its previous heartbeat, which is what the estimators take.
// The planner folds the workers' heartbeats with it, and the simulator its workers' counters. Not safe for
// concurrent use.
type Counters struct {
	last map[string]*counted // by worker id
	out  map[string]Delta    // Fold's result, reused by the next Fold
}

// counted is a copy of the counts of a worker's last heartbeat (its own storage, reused heartbeat after heartbeat:
// the simulator's workers beat every simulated second).
type counted struct {
	started time.Time
	counts  map[string]*wire.Observed // FanoutCounts and Messages only
}

// NewCounters returns a folder that has seen no heartbeat.
func NewCounters() *Counters { return &Counters{last: map[string]*counted{}, out: map[string]Delta{}} }

// Delta is what a worker counted for one variant since its previous heartbeat.
type Delta struct {
	wire.FanoutCounts
	// Messages is the task messages the items came in.
	Messages uint64
}

// Fold returns what worker id counted since its previous heartbeat, per key of reg.Observed, and keeps a copy of
// reg's counts; the map returned is valid until the next Fold. A worker seen for the first time, or restarted since
// (another Started), counts from zero; so does a variant whose item count went back, and a child or message count
// that went back counts nothing: a difference is never negative.
func (c *Counters) Fold(id string, reg wire.Registration) map[string]Delta {
	prev := c.last[id]
	if prev == nil {
		prev = &counted{counts: map[string]*wire.Observed{}}
		c.last[id] = prev
	}
	if !prev.started.Equal(reg.Started) {
		prev.started = reg.Started
		clear(prev.counts)
	}
	clear(c.out)
	for key, cur := range reg.Observed {
		var old wire.Observed
		if o := prev.counts[key]; o != nil && cur.Items >= o.Items {
			old = *o
		}
		delta := Delta{FanoutCounts: wire.FanoutCounts{Items: cur.Items - old.Items}}
		if len(cur.Children) > 0 { // a heartbeat of latencies alone (the simulator's servers) counts no child
			delta.Children = make(map[string]uint64, len(cur.Children))
		}
		for child, n := range cur.Children {
			if n >= old.Children[child] {
				delta.Children[child] = n - old.Children[child]
			}
		}
		if cur.Escalated >= old.Escalated {
			delta.Escalated = cur.Escalated - old.Escalated
		}
		if cur.Messages >= old.Messages {
			delta.Messages = cur.Messages - old.Messages
		}
		delta.SubRequests = subDelta(cur.FanoutCounts, old.FanoutCounts)
		c.out[key] = delta
	}
	prev.keep(reg.Observed)
	return c.out
}

// keep copies the counts of observed, in place of the previous ones.
func (p *counted) keep(observed map[string]wire.Observed) {
	for key := range p.counts {
		if _, ok := observed[key]; !ok {
			delete(p.counts, key)
		}
	}
	for key, cur := range observed {
		k := p.counts[key]
		if k == nil {
			k = &wire.Observed{}
			p.counts[key] = k
		}
		k.Items, k.Messages, k.Escalated = cur.Items, cur.Messages, cur.Escalated
		if len(cur.Children) > 0 && k.Children == nil {
			k.Children = make(map[string]uint64, len(cur.Children))
		}
		clear(k.Children)
		maps.Copy(k.Children, cur.Children)
		k.SubRequests = append(k.SubRequests[:0], cur.SubRequests...)
	}
}

// subDelta is the difference of two cumulative sub-request histograms; nil when either is malformed (a heartbeat is
// input: SubRequestBuckets bounds it) or nothing was counted.
func subDelta(cur, old wire.FanoutCounts) []uint64 {
	c, err := cur.SubRequestBuckets()
	o, err2 := old.SubRequestBuckets()
	if err != nil || err2 != nil || len(c) == 0 {
		return nil
	}
	out := make([]uint64, len(c))
	for k, n := range c {
		if k < len(o) && n >= o[k] {
			n -= o[k]
		}
		out[k] = n
	}
	return out
}

// Forget drops a worker that is gone: if it comes back, it counts from zero.
func (c *Counters) Forget(id string) { delete(c.last, id) }

// Workers is how many workers' heartbeats the folder keeps.
func (c *Counters) Workers() int { return len(c.last) }

// TaskDemand estimates the items per second reaching each task of a pipeline (control.Observed.TaskDemand, for
// allocators that plan each task on its own), one Estimator per task, from counts of the items that reached it. A
// task is estimated from its first count on; before that it has no estimate, and an allocator falls back to the
// root demand and the profiled factors. Not safe for concurrent use.
type TaskDemand struct {
	tasks   []string
	est     map[string]*Estimator
	counted map[string]bool
	pending map[string]int
}

// NewTaskDemand estimates the demand of tasks, each with an estimator newEstimator returns.
func NewTaskDemand(tasks []string, newEstimator func() *Estimator) *TaskDemand {
	d := &TaskDemand{tasks: tasks, est: map[string]*Estimator{}, counted: map[string]bool{}, pending: map[string]int{}}
	for _, t := range tasks {
		d.est[t] = newEstimator()
	}
	return d
}

// Add counts n items that reached task since the last Tick. Tasks not estimated are ignored.
func (d *TaskDemand) Add(task string, n uint64) {
	if d.est[task] == nil {
		return
	}
	d.counted[task] = true
	// Capped: a count beyond any real tick's (a corrupt counter) must not wrap around.
	d.pending[task] += int(min(n, uint64(math.MaxInt32-d.pending[task])))
}

// Tick folds the items counted over the interval since the last Tick into the estimates, and returns the estimate
// of every task counted so far (items per second).
func (d *TaskDemand) Tick(now time.Time, interval time.Duration) map[string]float64 {
	out := make(map[string]float64, len(d.tasks))
	for _, t := range d.tasks {
		if !d.counted[t] {
			continue
		}
		e := d.est[t]
		_ = e.Observe("items", d.pending[t], interval, now) // refused only above the estimator's MaxRate: then it holds
		d.pending[t] = 0
		out[t] = e.Tick(now)
	}
	return out
}
