package pipeline

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// A request's accuracy is the mean of its finished leaves' path accuracies, each weighted by its share of the request
// (completion weights: a task's sub-requests split its item's weight evenly). A task whose children are all parallel
// branches may weigh them otherwise (Task.BranchWeights): a detector's answer counting 0.7 of a request and its
// captioner's 0.3. The planner (the MILP's chain shares), the frontend and the simulator all weigh a leaf by
// LeafWeight, so that they report the same figure.

// LeafWeight is what a finished leaf's completion weight is multiplied by in its request's accuracy: per task on the
// path with BranchWeights, the weight of the branch the path takes over the even share the branch's copy carries
// (1 over the task's children). 1 on a path through no such task. The frontend calls it per leaf of every reply, so a
// spec that weighs no branch answers without parsing the path.
func (s *Spec) LeafWeight(path []string) float64 {
	if !s.weighsBranches() {
		return 1
	}
	w := 1.0
	for i := 0; i+1 < len(path); i++ {
		t, _ := s.Lookup(path[i])
		if t == nil || len(t.BranchWeights) == 0 {
			continue
		}
		if next, _ := s.Lookup(path[i+1]); next != nil {
			w *= t.BranchScale(next.Name)
		}
	}
	return w
}

// BranchScale is what a leaf below t's child weighs over its completion share at t: the child's branch weight over
// the even share of its copy (1 over t's children); 1 where t weighs no branches.
func (t *Task) BranchScale(child string) float64 {
	if len(t.BranchWeights) == 0 {
		return 1
	}
	return t.BranchWeights[child] * float64(len(t.Children))
}

// weighsBranches says some task has BranchWeights.
func (s *Spec) weighsBranches() bool {
	for i := range s.Tasks {
		if len(s.Tasks[i].BranchWeights) > 0 {
			return true
		}
	}
	return false
}

// validateBranchWeights checks a task's branch weights: only where every child is a parallel branch of one copy per
// item (so each copy's completion weight is an even share, which LeafWeight rescales), one positive weight per
// child, summing to 1.
func validateBranchWeights(t Task, path string, add func(string, string, ...any)) {
	if len(t.BranchWeights) == 0 {
		return
	}
	if len(t.Children) < 2 || len(t.SharedChildren()) > 0 {
		add(path, "task %q: branch weights need every child parallel (and two at least)", t.Name)
		return
	}
	for _, v := range t.Variants {
		if len(v.Branches) > 0 {
			add(path, "task %q: branch weights need one copy per item to each branch; variant %q gives %s a "+
				"fan-out of its own", t.Name, v.Name, strings.Join(slices.Sorted(maps.Keys(v.Branches)), ", "))
		}
	}
	sum := 0.0
	for _, c := range t.Children {
		w, ok := t.BranchWeights[c]
		switch {
		case !ok:
			add(path, "task %q: no weight for branch %q", t.Name, c)
		case !(w > 0) || math.IsInf(w, 0):
			add(fmt.Sprintf("%s.%s", path, c), "%v: want a weight > 0", w)
		}
		sum += w
	}
	for _, c := range slices.Sorted(maps.Keys(t.BranchWeights)) {
		if !contains(t.Children, c) {
			add(fmt.Sprintf("%s.%s", path, c), "%q is not a child of task %q", c, t.Name)
		}
	}
	if math.Abs(sum-1) > 1e-6 {
		add(path, "branch weights sum to %.6g, want 1", sum)
	}
}
