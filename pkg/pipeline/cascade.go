package pipeline

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Cascade serves a task by a cascade of its variants (CascadeServe): every item runs on the first; one whose
// answer's confidence reaches the plan's threshold leaves there, the others are sent on to the next variant, which
// answers them. The planner chooses the threshold among Levels for the demand (pkg/allocate.SolveCascade).
type Cascade struct {
	// Variants are the task's variants in the order an item tries them: two, the cheap one first.
	Variants []string `json:"variants" yaml:"variants,flow"`
	// Levels are the first variant's candidate thresholds, each with what it does to the task's items (measured by
	// `sleipnir profile`), in increasing threshold order.
	Levels []CascadeLevel `json:"levels,omitempty"`
	// Thresholds are candidate thresholds whose levels are computed from the variants' confidence distributions
	// (emulated variants, Variant.Confidence) when Levels is empty.
	Thresholds []float64 `json:"thresholds,omitempty" yaml:"thresholds,flow"`
	// Threshold is the one a static plan (the spec's allocation) runs the cascade at; absent, a static plan does
	// not run it. The planner chooses its own among the levels.
	Threshold float64 `json:"threshold,omitempty"`
	// Paths are levels measured on the items one path above the task brings it (an OCR detector's crops, matched
	// to the true lines), whose accuracies are that path's: what the cascade serves through it. Measured
	// (`sleipnir profile`); a path without them is scaled from Levels (Spec.CascadePathAccuracy).
	Paths []CascadePath `json:"paths,omitempty" yaml:"paths,omitempty"`
}

// CascadePath is a cascade's levels on the items of one path above its task. Escalation is the share of those
// items sent on; Accuracy and NextAccuracy are path accuracies (the share of the labelled set's true answers the
// path finds and answers right) of the items kept and of those sent on, each over its share of the items, so that
// (1-Escalation)*Accuracy + Escalation*NextAccuracy is what the path serves at the level. Over its share, a path
// accuracy may pass 1 when the items sent on are mostly the path's false finds.
type CascadePath struct {
	Path   []string       `json:"path" yaml:"path,flow"`
	Levels []CascadeLevel `json:"levels" yaml:"levels"`
}

// PathLevel is the level of threshold t measured on the items path (the variants above the task) brings: its
// listed level nearest t; false if the cascade has no levels for path.
func (c *Cascade) PathLevel(path []string, t float64) (CascadeLevel, bool) {
	for _, p := range c.Paths {
		if slices.Equal(p.Path, path) && len(p.Levels) > 0 {
			return nearest(p.Levels, t), true
		}
	}
	return CascadeLevel{}, false
}

// CascadeLevel is one candidate threshold of a cascade and what it does to the task's items.
type CascadeLevel struct {
	Threshold float64 `json:"threshold" yaml:"threshold"`
	// Escalation is the share of the items whose confidence on the first variant is below Threshold: sent on.
	Escalation float64 `json:"escalation" yaml:"escalation"`
	// Accuracy is the first variant's accuracy on the items it keeps; NextAccuracy the next variant's on those it
	// is sent (the harder ones, on real models).
	Accuracy     float64 `json:"accuracy" yaml:"accuracy"`
	NextAccuracy float64 `json:"next_accuracy" yaml:"next_accuracy"`
}

// Value is the cascade's accuracy on the task's items at this level: the kept items' and the escalated ones'.
func (l CascadeLevel) Value() float64 {
	return (1-l.Escalation)*l.Accuracy + l.Escalation*l.NextAccuracy
}

// Confidence is how an emulated variant's confidence in an answer is drawn: a normal, clipped to [0, 1], whose mean
// and deviation depend on whether the answer is right (which happens with the variant's accuracy).
type Confidence struct {
	Right ConfidenceDist `json:"right" yaml:"right,flow"`
	Wrong ConfidenceDist `json:"wrong" yaml:"wrong,flow"`
}

// ConfidenceDist is a normal's mean and standard deviation.
type ConfidenceDist struct {
	Mean float64 `json:"mean" yaml:"mean"`
	SD   float64 `json:"sd" yaml:"sd"`
}

// Below is the probability that a confidence drawn from d is below threshold t (0 at t <= 0: a clipped draw is
// never below 0).
func (d ConfidenceDist) Below(t float64) float64 {
	if t <= 0 {
		return 0
	}
	return 0.5 * math.Erfc(-(t-d.Mean)/(d.SD*math.Sqrt2))
}

// Draw is the confidence of one answer from d, given a standard normal draw z.
func (d ConfidenceDist) Draw(z float64) float64 { return min(1, max(0, d.Mean+d.SD*z)) }

// LevelAt computes the level of threshold t from the confidence of the first variant, with the next variant's
// answers independent of the first's (as the emulated executor draws them).
func LevelAt(first, next *Variant, t float64) CascadeLevel {
	a := first.Accuracy
	rightBelow, wrongBelow := first.Confidence.Right.Below(t), first.Confidence.Wrong.Below(t)
	e := a*rightBelow + (1-a)*wrongBelow
	l := CascadeLevel{Threshold: t, Escalation: e, Accuracy: a, NextAccuracy: next.Accuracy}
	if e < 1 {
		l.Accuracy = a * (1 - rightBelow) / (1 - e)
	}
	return l
}

// Level is the cascade's level of threshold t: the listed level nearest it.
func (c *Cascade) Level(t float64) CascadeLevel { return nearest(c.Levels, t) }

func nearest(levels []CascadeLevel, t float64) CascadeLevel {
	best := levels[0]
	for _, l := range levels[1:] {
		if math.Abs(l.Threshold-t) < math.Abs(best.Threshold-t) {
			best = l
		}
	}
	return best
}

// Next is the variant an item of variant v goes on to when its confidence is too low; "" if v is the cascade's
// last or not in it.
func (c *Cascade) Next(v string) string {
	for i := 0; i+1 < len(c.Variants); i++ {
		if c.Variants[i] == v {
			return c.Variants[i+1]
		}
	}
	return ""
}

// Cascades lists the tasks that declare a cascade.
func (s *Spec) Cascades() []*Task {
	var out []*Task
	for i := range s.Tasks {
		if s.Tasks[i].Cascade != nil {
			out = append(out, &s.Tasks[i])
		}
	}
	return out
}

// WithoutCascades is a copy of s whose tasks declare no cascade: the same pipeline, each task routed as any other
// (to compare a cascade with its absence).
func (s *Spec) WithoutCascades() *Spec {
	c := *s
	c.Tasks = append([]Task(nil), s.Tasks...)
	for i := range c.Tasks {
		c.Tasks[i].Cascade = nil
	}
	return &c
}

// CascadePathAccuracy is the end-to-end accuracy of a leaf's path where the cascades run at thresholds (task ->
// threshold, the plan's): a path whose last hops are a cascade's first variant and then its next is an item that was
// sent on; one that ends at a cascade's first variant, an item it kept. Either is the level's accuracy measured on
// the items of the path above the task (Cascade.PathLevel) when there is one. Without it, the accuracy of the path
// to the first variant (PathAccuracyOf) times the level's accuracy on those items over the first variant's own:
// what the tasks above lose (an OCR line never found) is what the first variant's path loses, since every item of
// the cascade takes it. Any other path is PathAccuracyOf's.
func (s *Spec) CascadePathAccuracy(path []string, thresholds map[string]float64) float64 {
	n := len(path)
	if n == 0 || len(thresholds) == 0 {
		return s.PathAccuracyOf(path)
	}
	t, v := s.Lookup(path[n-1])
	if t == nil || t.Cascade == nil {
		return s.PathAccuracyOf(path)
	}
	th, ok := thresholds[t.Name]
	if !ok {
		return s.PathAccuracyOf(path)
	}
	c := t.Cascade
	l := c.Level(th)
	if v.Name == c.Variants[0] {
		if pl, ok := c.PathLevel(path[:n-1], th); ok {
			return pl.Accuracy
		}
		return s.PathAccuracyOf(path) * ratio(l.Accuracy, v.Accuracy)
	}
	if n >= 2 && path[n-2] == (wire.VariantKey{Task: t.Name, Variant: c.Variants[0]}).String() {
		if pl, ok := c.PathLevel(path[:n-2], th); ok {
			return pl.NextAccuracy
		}
		_, first := s.Lookup(path[n-2])
		return s.PathAccuracyOf(path[:n-1]) * ratio(l.NextAccuracy, first.Accuracy)
	}
	return s.PathAccuracyOf(path)
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// computeLevels fills the levels of each cascade given by thresholds from its first variant's confidence.
func (s *Spec) computeLevels() {
	for _, t := range s.Cascades() {
		c := t.Cascade
		if len(c.Levels) > 0 || len(c.Variants) != 2 {
			continue
		}
		first, next := s.Variant(t.Name, c.Variants[0]), s.Variant(t.Name, c.Variants[1])
		if first == nil || next == nil || first.Confidence == nil {
			continue
		}
		for _, th := range c.Thresholds {
			c.Levels = append(c.Levels, LevelAt(first, next, th))
		}
	}
}

// validateCascade checks task i's cascade: two distinct variants of a leaf task, the first reporting a confidence,
// and candidate thresholds (levels, or thresholds and confidence distributions to compute them from).
func (s *Spec) validateCascade(i int, t Task, add func(string, string, ...any)) {
	c := t.Cascade
	p := fmt.Sprintf("tasks[%d].cascade", i)
	if len(t.Children) > 0 {
		add(p, "task %q has children: a cascade must be a leaf task (cascades before children: not yet)", t.Name)
	}
	if len(c.Variants) != 2 {
		add(p+".variants", "%d variants: a cascade has two, the first and the one it sends items on to", len(c.Variants))
		return
	}
	if c.Variants[0] == c.Variants[1] {
		add(p+".variants", "%q twice", c.Variants[0])
	}
	for j, name := range c.Variants {
		if !hasVariant(&t, name) {
			add(fmt.Sprintf("%s.variants[%d]", p, j), "no variant %q in task %q", name, t.Name)
			return
		}
	}
	first := s.Variant(t.Name, c.Variants[0])
	switch {
	case first.Executor.Kind == ExecutorEmulated && first.Confidence == nil:
		add(p+".variants[0]", "emulated variant %q needs a confidence to be a cascade's first", first.Name)
	case first.Executor.Kind == ExecutorONNX && first.Executor.Program != ProgramOCRRecognize:
		add(p+".variants[0]", "variant %q reports no confidence (program %q): only ocr-recognize does", first.Name,
			first.Executor.Program)
	}
	switch {
	case len(c.Levels) == 0 && len(c.Thresholds) == 0:
		add(p, "levels or thresholds required: the candidate thresholds")
	case len(c.Levels) == 0 && first.Confidence == nil:
		add(p, "no levels: measure them (bin/sleipnir profile, into the profile file), or give the emulated "+
			"first variant %q a confidence to compute them from", first.Name)
	}
	increasing := func(ls []CascadeLevel) bool {
		return sort.SliceIsSorted(ls, func(a, b int) bool { return ls[a].Threshold < ls[b].Threshold })
	}
	if !increasing(c.Levels) {
		add(p+".levels", "thresholds must increase")
	}
	for j, cp := range c.Paths {
		if len(cp.Levels) == 0 || !increasing(cp.Levels) {
			add(fmt.Sprintf("%s.paths[%d].levels", p, j), "levels required, in increasing threshold order")
		}
	}
	if !sort.Float64sAreSorted(c.Thresholds) {
		add(p+".thresholds", "thresholds must increase")
	}
}

// writeCascades writes the measured levels of profile file pf (named name) into the document's cascades.
func writeCascades(tasks []any, pf *ProfileFile, name string) error {
	for _, cp := range pf.Cascades {
		var c map[string]any
		for _, t := range tasks {
			if tm, _ := t.(map[string]any); tm["name"] == cp.Task {
				c, _ = tm["cascade"].(map[string]any)
			}
		}
		if c == nil {
			return fmt.Errorf("profiles: %s measures a cascade of %q, which the spec does not declare", name, cp.Task)
		}
		c["levels"] = levelsDoc(cp.Levels)
		if len(cp.Paths) > 0 {
			paths := make([]any, len(cp.Paths))
			for i, pl := range cp.Paths {
				paths[i] = map[string]any{"path": toAny(pl.Path), "levels": levelsDoc(pl.Levels)}
			}
			c["paths"] = paths
		}
	}
	return nil
}

func levelsDoc(ls []CascadeLevel) []any {
	levels := make([]any, len(ls))
	for i, l := range ls {
		levels[i] = map[string]any{"threshold": l.Threshold, "escalation": l.Escalation, "accuracy": l.Accuracy,
			"next_accuracy": l.NextAccuracy}
	}
	return levels
}
