// Package ramsis is RAMSIS's model selection (Mendoza et al., EuroSys '24) mapped to Sleipnir's data plane: a
// Markov decision process whose policy, computed by value iteration from the arrival distribution at the planned
// load and the variants' latency profiles, chooses which hosted variant of a task each item joins, from the
// variants' queues and the item's slack. Sleipnir hosts one variant per subject, its replicas sharing it, so the
// choice is where an item is sent (the hop step, the frontend for the root), not which model a worker runs next
// (docs/ramsis.md says why). Pure: no clock, no NATS; the arrival draws come from a fixed seed so that a policy is
// a function of its model.
package ramsis

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Option is one hosted variant of the task as the policy sees it.
type Option struct {
	Variant  string
	Accuracy float64
	// Work is the time one more item adds to its queue's backlog: the replicas serve full batches, so an item takes
	// p95(max batch) / (replicas * max batch) of their time.
	Work time.Duration
	// Completion is the time from joining the queue, with the given backlog ahead, to leaving it served.
	Completion func(backlog time.Duration) time.Duration
}

// Model is one task's decision process: its hosted variants, the arrivals of its items and their slack.
type Model struct {
	Options []Option
	// Rate is the task's items per second at the planned load; CV the coefficient of variation of the times
	// between them (1: Poisson; Gamma otherwise).
	Rate, CV float64
	// Slacks are the times an item may have for this task (to its deadline, less what the tasks below are
	// allotted), equally likely: the value of a state averages over the next item's slack.
	Slacks []time.Duration
	// Cells bounds the states: the backlog grid has at most Cells points in all (0: defaultCells).
	Cells int
	// Miss is the reward of an item that misses its deadline (0: RAMSIS's; negative counts a violation as worse
	// than an item of no accuracy).
	Miss float64
	// Start is where value iteration starts from (nil: zero): a policy's Values for a similar model (the same task
	// at another load level) makes it converge in far fewer iterations. Ignored when its size is not the grid's.
	Start []float64
}

// Policy is a solved model. Its states are a backlog per option (the time the variant's replicas need to serve
// what is queued there: RAMSIS's fixed-length discretisation of time, one axis per hosted variant); C[w] is the
// expected value of the state after the next inter-arrival time from backlog grid point w, which Choose adds to
// the reward of each action.
type Policy struct {
	Options []Option
	step    time.Duration // the grid's spacing
	points  int           // grid points per axis
	horizon time.Duration // the largest backlog represented: (points-1) * step
	gamma   float64
	miss    float64
	cont    []float64 // C, row-major over the options' axes (the first option's axis slowest)
	// Values is the value of each grid point (Model.Start for the next model like this one).
	Values  []float64
	strides []int
	// Iterations and Elapsed say what solving it took (Elapsed measured by the caller's clock: Solve takes one).
	Iterations int
	Elapsed    time.Duration
	States     int
}

// maxOptions bounds the axes: the state space grows as points^options.
const maxOptions = 4

// defaultCells and maxPoints bound the backlog grid: its points in all, and per axis. Every plan the planner checks
// (pkg/control's plan check simulates its candidates) computes the policies of its load level: a first version
// (40,000 cells, 64 points an axis, a stricter stop, no rounding of the cache's key) took 0.1-3.9 s a solve, and a
// simulated minute of the traffic example under Loki's planner 345 s of wall time, against 8 s with the tables.
const (
	defaultCells = 4096
	maxPoints    = 32
)

// maxGamma bounds the discount: a horizon of 200 items. Value iteration takes about 1/(1-gamma) iterations.
const maxGamma = 0.995

// horizonSlacks is how many times the largest slack the backlog grid reaches.
const horizonSlacks = 2

// maxIterations bounds value iteration (Policy.Iterations says where it stopped).
const maxIterations = 5000

// Solve computes the policy of m by value iteration; now reads the caller's clock (for Policy.Elapsed only).
func Solve(m Model, now func() time.Time) (*Policy, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	start := now()
	n := len(m.Options)
	cells := m.Cells
	if cells <= 0 {
		cells = defaultCells
	}
	points := min(maxPoints, int(math.Floor(math.Pow(float64(cells), 1/float64(n))+1e-9)))
	points = max(points, 4)
	var maxSlack time.Duration
	for _, s := range m.Slacks {
		maxSlack = max(maxSlack, s)
	}
	// The grid reaches twice the largest slack: a backlog beyond the slack misses every deadline, but how far
	// beyond says how long its queue stays useless (cut at the slack, every late state looked alike and the policy
	// sent late items to the longer queue).
	step := max(horizonSlacks*maxSlack/time.Duration(points-1), time.Microsecond)
	p := &Policy{Options: m.Options, miss: m.Miss, step: step, points: points, horizon: step * time.Duration(points-1)}
	p.strides = make([]int, n)
	total := 1
	for a := n - 1; a >= 0; a-- {
		p.strides[a] = total
		total *= points
	}
	p.States = total
	arrivals := sparse(interArrivals(m.Rate, m.CV, step, points))
	// The discount spans the items that arrive while the largest backlog drains: a choice weighs what it does to
	// them.
	p.gamma = min(maxGamma, max(0.9, 1-1/(m.Rate*p.horizon.Seconds())))
	reward := p.rewards(m)
	value, next := make([]float64, total), make([]float64, total)
	if len(m.Start) == total {
		copy(value, m.Start)
	}
	p.cont = make([]float64, total)
	idx, later := make([]int, n), make([]float64, n)
	maxAcc := 0.0
	for _, o := range m.Options {
		maxAcc = max(maxAcc, o.Accuracy)
	}
	// Stopped on the span of the change (its largest less its smallest): the values' common offset, which takes
	// 1/(1-gamma) iterations to settle, changes no choice.
	tol := 1e-3 * maxAcc
	for p.Iterations = 1; p.Iterations <= maxIterations; p.Iterations++ {
		p.expectation(value, arrivals, idx)
		hi, lo := math.Inf(-1), math.Inf(1)
		for w := range total {
			p.unravel(w, idx)
			for a := range n {
				later[a] = p.gamma * p.after(w, a, idx[a])
			}
			v := 0.0
			for s := range m.Slacks {
				best := math.Inf(-1)
				for a := range n {
					best = max(best, reward[a][idx[a]*len(m.Slacks)+s]+later[a])
				}
				v += best
			}
			v /= float64(len(m.Slacks))
			hi, lo = max(hi, v-value[w]), min(lo, v-value[w])
			next[w] = v
		}
		value, next = next, value
		if hi-lo < tol*(1-p.gamma)/p.gamma {
			break
		}
	}
	p.expectation(value, arrivals, idx)
	p.Values = value
	p.Elapsed = now().Sub(start)
	return p, nil
}

func (m Model) check() error {
	switch {
	case len(m.Options) == 0:
		return errors.New("ramsis: no option")
	case len(m.Options) > maxOptions:
		return fmt.Errorf("ramsis: %d options: at most %d", len(m.Options), maxOptions)
	case !(m.Rate > 0) || math.IsInf(m.Rate, 0):
		return fmt.Errorf("ramsis: arrival rate %v: want a positive number", m.Rate)
	case !(m.CV > 0) || math.IsInf(m.CV, 0):
		return fmt.Errorf("ramsis: coefficient of variation %v: want a positive number", m.CV)
	case len(m.Slacks) == 0:
		return errors.New("ramsis: no slack")
	}
	for _, o := range m.Options {
		if o.Work <= 0 || o.Completion == nil {
			return fmt.Errorf("ramsis: option %q: want a positive work and a completion", o.Variant)
		}
	}
	for _, s := range m.Slacks {
		if s <= 0 {
			return fmt.Errorf("ramsis: slack %v: want a positive time", s)
		}
	}
	return nil
}

// rewards is, per option a, per grid point i of its axis and slack s, the reward of sending an item with slack s to
// a when a's backlog is at point i: RAMSIS's accuracy times meeting the deadline.
func (p *Policy) rewards(m Model) [][]float64 {
	out := make([][]float64, len(m.Options))
	for a, o := range m.Options {
		out[a] = make([]float64, p.points*len(m.Slacks))
		for i := range p.points {
			done := o.Completion(time.Duration(i) * p.step)
			for s, slack := range m.Slacks {
				out[a][i*len(m.Slacks)+s] = m.Miss
				if done <= slack {
					out[a][i*len(m.Slacks)+s] = o.Accuracy
				}
			}
		}
	}
	return out
}

// unravel writes grid point w's index on each axis into idx.
func (p *Policy) unravel(w int, idx []int) {
	for a, st := range p.strides {
		idx[a] = w / st % p.points
	}
}

// expectation sets C[w] = E[value(w less one inter-arrival time on every axis)]: every queue drains for the time to
// the next arrival (its backlog is time).
func (p *Policy) expectation(value []float64, arrivals []drain, idx []int) {
	for w := range p.cont {
		p.unravel(w, idx)
		c := 0.0
		for _, d := range arrivals {
			at := 0
			for a, i := range idx {
				at += max(0, i-d.steps) * p.strides[a]
			}
			c += d.p * value[at]
		}
		p.cont[w] = c
	}
}

// drain is a number of grid steps the queues drain by before the next arrival, and its probability.
type drain struct {
	steps int
	p     float64
}

// sparse is p's drains of non-negligible weight, renormalised.
func sparse(p []float64) []drain {
	var out []drain
	sum := 0.0
	for k, pk := range p {
		if pk > 1e-6 {
			out = append(out, drain{k, pk})
			sum += pk
		}
	}
	for i := range out {
		out[i].p /= sum
	}
	return out
}

// after is C at grid point w with option a's backlog (at point i on its axis) grown by one item's work, linearly
// between the grid points either side; a backlog beyond the grid stays at its edge.
func (p *Policy) after(w, a, i int) float64 {
	x := float64(p.Options[a].Work) / float64(p.step)
	q := int(x)
	g := x - float64(q)
	lo := min(i+q, p.points-1)
	hi := min(i+q+1, p.points-1)
	base := w - i*p.strides[a]
	return (1-g)*p.cont[base+lo*p.strides[a]] + g*p.cont[base+hi*p.strides[a]]
}

// Choose is the option an item with the given slack joins when the options' queues hold the given backlogs (aligned
// with Options): the one whose reward now plus discounted value after is the largest, the value read between grid
// points (multilinear). Allocation-free; safe for concurrent use.
func (p *Policy) Choose(backlog []time.Duration, slack time.Duration) int {
	best, bestQ := 0, math.Inf(-1)
	for a, o := range p.Options {
		q := p.miss
		if o.Completion(backlog[a]) <= slack {
			q = o.Accuracy
		}
		q += p.gamma * p.contAt(backlog, a)
		if q > bestQ+1e-12 {
			best, bestQ = a, q
		}
	}
	return best
}

// contAt is C at the backlogs with option a's grown by one item's work, interpolated multilinearly.
func (p *Policy) contAt(backlog []time.Duration, grown int) float64 {
	n := len(p.Options)
	var lo [maxOptions]int
	var frac [maxOptions]float64
	for a := range n {
		b := backlog[a]
		if a == grown {
			b += p.Options[a].Work
		}
		x := min(max(0, float64(b)/float64(p.step)), float64(p.points-1))
		lo[a] = min(int(x), p.points-2)
		frac[a] = x - float64(lo[a])
	}
	sum := 0.0
	for corner := range 1 << n {
		wgt, at := 1.0, 0
		for a := range n {
			i := lo[a]
			if corner&(1<<a) != 0 {
				i++
				wgt *= frac[a]
			} else {
				wgt *= 1 - frac[a]
			}
			at += i * p.strides[a]
		}
		if wgt != 0 {
			sum += wgt * p.cont[at]
		}
	}
	return sum
}
