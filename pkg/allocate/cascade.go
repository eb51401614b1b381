// Cascades (pipeline.Cascade) by gear plans: one allocation per candidate setting of the thresholds, the best kept.

package allocate

import (
	"math"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// MaxGears bounds the threshold settings SolveCascade tries (the product of the cascades' levels).
const MaxGears = 64

// SolveCascade allocates a spec whose tasks may declare cascades, by gear plans (CascadeServe): Solve on the spec
// without its cascades (every variant routed as usual), and on one spec per setting of the cascades' thresholds in
// which each cascade is served as a cascade at that threshold (cascadeSpec); the result kept is the one that serves
// the most demand, then the most accurate, then the one on the fewest servers. Its Cascades holds the thresholds
// chosen (none: the plain allocation won). scale multiplies, per cascade task, the levels' escalation rates (the
// rate workers measured over the profiled one at the threshold in force; absent: 1), capped at 1.
func SolveCascade(in Input, opt Options, scale map[string]float64) (*Result, error) {
	start := time.Now()
	// The plain allocation's error stands only if no gear has one either (a chain may fit its budget only as a
	// cascade, or only without one).
	best, err := Solve(in, opt)
	tasks := in.Spec.Cascades()
	if len(tasks) == 0 {
		return best, err
	}
	names := nextTasks(in.Spec, tasks)
	for _, setting := range gears(tasks) {
		g := in
		g.Spec = cascadeSpec(in.Spec, tasks, names, setting, scale)
		g.cascadeNext = map[string]bool{}
		for _, n := range names {
			g.cascadeNext[n] = true
		}
		r, gerr := Solve(g, opt)
		if gerr != nil {
			// A gear whose two stages do not fit the latency budget (or too large a model) is no gear: the
			// others stand.
			continue
		}
		r.Cascades = map[string]float64{}
		for i, t := range tasks {
			r.Cascades[t.Name] = setting[i]
		}
		unsplit(r, tasks, names)
		if best == nil || better(r, best, in.MinAccuracy > 0) {
			best, err = r, nil
		}
	}
	if best != nil {
		best.SolveMs = float64(time.Since(start).Microseconds()) / 1000
	}
	return best, err
}

// better says a beats b: it serves more, or as much and more accurately, or as accurately on fewer servers. With an
// accuracy floor (each result at or above it), as much on fewer servers (a lower cost), then more accurately.
func better(a, b *Result, floor bool) bool {
	const eps = 1e-9
	if math.Abs(a.ServedQPS-b.ServedQPS) > eps*max(1, b.ServedQPS) {
		return a.ServedQPS > b.ServedQPS
	}
	if floor {
		switch {
		case math.Abs(a.CostPerHour-b.CostPerHour) > eps*max(1, b.CostPerHour):
			return a.CostPerHour < b.CostPerHour
		case a.ServersUsed != b.ServersUsed:
			return a.ServersUsed < b.ServersUsed
		}
	}
	if math.Abs(a.SystemAccuracy-b.SystemAccuracy) > eps {
		return a.SystemAccuracy > b.SystemAccuracy
	}
	return a.ServersUsed < b.ServersUsed
}

// gears lists the settings of the cascades' thresholds: every combination of their levels, at most MaxGears (the
// first cascades' levels varied last).
func gears(tasks []*pipeline.Task) [][]float64 {
	out := [][]float64{nil}
	for _, t := range tasks {
		var next [][]float64
		for _, s := range out {
			for _, l := range t.Cascade.Levels {
				if len(next) < MaxGears {
					next = append(next, append(append([]float64(nil), s...), l.Threshold))
				}
			}
		}
		out = next
	}
	return out
}

// cascadeSpec is spec with each cascade task served as its cascade at the setting's threshold: the task keeps only
// the cascade's first variant, which sends the level's escalation rate of its items (times scale) to a new child task
// holding the next variant, and each path through them is worth the cascade's accuracy at that level
// (pipeline.Spec.CascadePathAccuracy, items kept and items sent on weighted by the level's rate). The allocation then
// sizes both stages for their loads, and budgets an item sent on for both latencies and one more hop.
func cascadeSpec(spec *pipeline.Spec, tasks []*pipeline.Task, names []string, setting []float64,
	scale map[string]float64) *pipeline.Spec {
	g := *spec
	g.Tasks = append([]pipeline.Task(nil), spec.Tasks...)
	g.PathAccuracy = append([]pipeline.PathAccuracy(nil), spec.PathAccuracy...)
	g.Allocation = nil
	thresholds := map[string]float64{}
	for i, t := range tasks {
		thresholds[t.Name] = setting[i]
	}
	for i, t := range tasks {
		c := t.Cascade
		l := c.Level(setting[i])
		// The measured scale moves the second stage's load, not the level's accuracy: the level's figures hold
		// together (fewer items sent on would mean less accurate kept ones, which no heartbeat measures).
		e := l.Escalation
		if s, ok := scale[t.Name]; ok && s > 0 {
			e = min(1, e*s)
		}
		next := names[i]
		first := *spec.Variant(t.Name, c.Variants[0])
		first.Fanout = &pipeline.Fanout{Mean: e, Shares: map[string]float64{next: 1},
			Distribution: pipeline.FanoutPoisson}
		ti := taskIndex(&g, t.Name)
		g.Tasks[ti] = pipeline.Task{Name: t.Name, Children: []string{next}, Variants: []pipeline.Variant{first}}
		g.Tasks = append(g.Tasks, pipeline.Task{Name: next,
			Variants: []pipeline.Variant{*spec.Variant(t.Name, c.Variants[1])}})
		firstKey := wire.VariantKey{Task: t.Name, Variant: c.Variants[0]}.String()
		nextKey := wire.VariantKey{Task: t.Name, Variant: c.Variants[1]}.String()
		for _, p := range spec.Paths() {
			if p[len(p)-1] != firstKey {
				continue
			}
			kept := spec.CascadePathAccuracy(p, thresholds)
			on := spec.CascadePathAccuracy(append(append([]string(nil), p...), nextKey), thresholds)
			path := append(append([]string(nil), p...), wire.VariantKey{Task: next, Variant: c.Variants[1]}.String())
			// Kept and sent-on items weighed by the path's own escalation where the profile measured the path's
			// levels (its task's items, e.g. one detector's crops), else the task's. The second stage's load stays
			// the task's rate: a variant's fan-out is one number, whichever path brought its items.
			esc := l.Escalation
			if pl, ok := c.PathLevel(p[:len(p)-1], setting[i]); ok {
				esc = pl.Escalation
			}
			g.PathAccuracy = append(g.PathAccuracy, pipeline.PathAccuracy{Path: path,
				Accuracy: (1-esc)*kept + esc*on})
		}
	}
	return &g
}

// nextTasks names the tasks the cascades' second stages are planned as: task + "-next", made unique among spec's
// tasks and each other.
func nextTasks(spec *pipeline.Spec, tasks []*pipeline.Task) []string {
	taken := map[string]bool{}
	for _, t := range spec.Tasks {
		taken[t.Name] = true
	}
	names := make([]string, len(tasks))
	for i, t := range tasks {
		name := t.Name + "-next"
		for taken[name] {
			name += "-"
		}
		taken[name], names[i] = true, name
	}
	return names
}

func taskIndex(spec *pipeline.Spec, task string) int {
	for i := range spec.Tasks {
		if spec.Tasks[i].Name == task {
			return i
		}
	}
	return -1
}

// unsplit renames a gear's result back to the spec's tasks: each cascade's second stage hosted in its own task again.
func unsplit(r *Result, tasks []*pipeline.Task, names []string) {
	for i := range r.Variants {
		for j, n := range names {
			if r.Variants[i].Task == n {
				r.Variants[i].Task = tasks[j].Name
			}
		}
	}
}
