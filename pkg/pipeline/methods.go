package pipeline

import (
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Root is the task no other task lists as a child.
func (s *Spec) Root() *Task {
	child := map[string]bool{}
	for _, t := range s.Tasks {
		for _, c := range t.Children {
			child[c] = true
		}
	}
	for i := range s.Tasks {
		if !child[s.Tasks[i].Name] {
			return &s.Tasks[i]
		}
	}
	return nil
}

// Task returns the named task, or nil.
func (s *Spec) Task(name string) *Task {
	for i := range s.Tasks {
		if s.Tasks[i].Name == name {
			return &s.Tasks[i]
		}
	}
	return nil
}

// Lookup finds the variant a "task/variant" key names (wire.VariantKey), and its task: nil, nil when the key is
// malformed or s has no such variant.
func (s *Spec) Lookup(key string) (*Task, *Variant) {
	k, err := wire.ParseVariantKey(key)
	if err != nil {
		return nil, nil
	}
	v := s.Variant(k.Task, k.Variant)
	if v == nil {
		return nil, nil
	}
	return s.Task(k.Task), v
}

// Variant returns a task's named variant, or nil.
func (s *Spec) Variant(task, variant string) *Variant {
	t := s.Task(task)
	if t == nil {
		return nil
	}
	for i := range t.Variants {
		if t.Variants[i].Name == variant {
			return &t.Variants[i]
		}
	}
	return nil
}

// IsLeaf reports whether a task has no children.
func (s *Spec) IsLeaf(task string) bool {
	t := s.Task(task)
	return t != nil && len(t.Children) == 0
}

// Parents lists the tasks that list task as a child: one, but for a join task (Task.Join); none for the root.
func (s *Spec) Parents(task string) []string {
	var out []string
	for _, t := range s.Tasks {
		if contains(t.Children, task) {
			out = append(out, t.Name)
		}
	}
	return out
}

// JoinAfter is the join task that task's items go to, when its one child is a join task: task's items end there
// as parts, which the frontend joins (docs/design.md, "Joins"); nil otherwise.
func (s *Spec) JoinAfter(task string) *Task {
	t := s.Task(task)
	if t == nil || len(t.Children) != 1 {
		return nil
	}
	if j := s.Task(t.Children[0]); j != nil && j.Join != nil {
		return j
	}
	return nil
}

// Parent returns the parent of a task ("" for the root; a join task's first).
func (s *Spec) Parent(task string) string {
	for _, t := range s.Tasks {
		for _, c := range t.Children {
			if c == task {
				return t.Name
			}
		}
	}
	return ""
}

// Chains lists every root-to-leaf chain of task names.
func (s *Spec) Chains() [][]string {
	var out [][]string
	var walk func(t *Task, prefix []string)
	walk = func(t *Task, prefix []string) {
		chain := append(append([]string(nil), prefix...), t.Name)
		if len(t.Children) == 0 {
			out = append(out, chain)
			return
		}
		for _, c := range t.Children {
			walk(s.Task(c), chain)
		}
	}
	if r := s.Root(); r != nil {
		walk(r, nil)
	}
	return out
}

// Paths lists every root-to-leaf path of "task/variant" hops, over all chains.
func (s *Spec) Paths() [][]string {
	var out [][]string
	for _, chain := range s.Chains() {
		paths := [][]string{nil}
		for _, task := range chain {
			var next [][]string
			for _, p := range paths {
				for _, v := range s.Task(task).Variants {
					key := wire.VariantKey{Task: task, Variant: v.Name}.String()
					next = append(next, append(append([]string(nil), p...), key))
				}
			}
			paths = next
		}
		out = append(out, paths...)
	}
	return out
}

// PathAccuracyOf is the end-to-end accuracy of a root-to-leaf path: its path_accuracy entry if listed, else the
// product of its variants' accuracies.
func (s *Spec) PathAccuracyOf(path []string) float64 {
	key := strings.Join(modelPath(path), ",")
	for _, pa := range s.PathAccuracy {
		if strings.Join(pa.Path, ",") == key {
			return pa.Accuracy
		}
	}
	acc := 1.0
	for _, key := range path {
		_, v := s.Lookup(key)
		if v == nil {
			return 0
		}
		acc *= v.Accuracy
	}
	return acc
}

// MostAccurate is the task's most accurate variant (ties: lower p50 at the smallest batch, then name).
func (t *Task) MostAccurate() *Variant {
	best := &t.Variants[0]
	for i := 1; i < len(t.Variants); i++ {
		v := &t.Variants[i]
		switch {
		case v.Accuracy > best.Accuracy:
			best = v
		case v.Accuracy == best.Accuracy:
			if v.Profile[0].P50Ms < best.Profile[0].P50Ms ||
				v.Profile[0].P50Ms == best.Profile[0].P50Ms && v.Name < best.Name {
				best = v
			}
		}
	}
	return best
}

// Point returns the profile point of exactly this batch size.
func (v *Variant) Point(batch int) (ProfilePoint, bool) {
	for _, p := range v.Profile {
		if p.Batch == batch {
			return p, true
		}
	}
	return ProfilePoint{}, false
}

// LatencyFor is the profile point a batch of n items runs at: the smallest profiled batch of at least n, or the
// largest one when n exceeds them all.
func (v *Variant) LatencyFor(n int) ProfilePoint { return v.Profile[v.PointFor(n)] }

// PointFor is the index in v.Profile of LatencyFor's point for n items.
func (v *Variant) PointFor(n int) int {
	for i, p := range v.Profile {
		if p.Batch >= n {
			return i
		}
	}
	return len(v.Profile) - 1
}

// Throughput is the items per second one replica serves with full batches of the given size, from the p50 latency.
func (v *Variant) Throughput(batch int) float64 {
	p := v.LatencyFor(batch)
	return float64(p.Batch) / (p.P50Ms / 1000)
}

// Share is the share of f's sub-requests that go to child, one of children (the child tasks of f's task). Shares
// may be omitted for a task of one child, which then gets them all; a child without a share gets none.
func (f Fanout) Share(child string, children []string) float64 {
	if s, ok := f.Shares[child]; ok {
		return s
	}
	if len(f.Shares) == 0 && len(children) == 1 && children[0] == child {
		return 1
	}
	return 0
}

// FanoutOf is the multiplicative factor in force for v, a variant of t: measured's ("task/variant" -> factor, the
// planner's estimates) when it has v, otherwise v's profile's; nil for a variant of a leaf task. The allocation and
// the routing both read factors through it (and Share).
func (t *Task) FanoutOf(v *Variant, measured map[string]Fanout) *Fanout {
	if m, ok := measured[wire.VariantKey{Task: t.Name, Variant: v.Name}.String()]; ok {
		return &m
	}
	return v.Fanout
}

// FanoutTo is the mean number of sub-requests an item executed by v, a variant of t, sends to the child task
// child: a measured factor's (FanoutOf and Share: the workers count what each child got, parallel or not), else
// for a parallel child its branch's (one copy: 1; a branch's demand is its parent's items, not a share of them),
// else the profiled fan-out's share.
func (t *Task) FanoutTo(v *Variant, child string, measured map[string]Fanout) float64 {
	if m, ok := measured[wire.VariantKey{Task: t.Name, Variant: v.Name}.String()]; ok {
		return m.Mean * m.Share(child, t.Children)
	}
	if t.IsParallel(child) {
		return t.BranchOf(v, child).Mean
	}
	if v.Fanout == nil {
		return 0
	}
	return v.Fanout.Mean * v.Fanout.Share(child, t.Children)
}

// IsParallel reports whether child is one of t's parallel children (Task.Parallel): it gets every item.
func (t *Task) IsParallel(child string) bool { return contains(t.Parallel, child) }

// SharedChildren are t's children that are not parallel: those its variants' Fanout splits its sub-requests over.
func (t *Task) SharedChildren() []string {
	var out []string
	for _, c := range t.Children {
		if !t.IsParallel(c) {
			out = append(out, c)
		}
	}
	return out
}

// copyBranch is a parallel child's fan-out when its variant gives it none: one copy of every item.
var copyBranch = Fanout{Mean: 1, Distribution: FanoutFixed}

// BranchOf is the distribution of the number of sub-requests one item executed by v, a variant of t, sends to
// child: for a parallel child its branch's own (Variant.Branches; one copy when not listed), for another child
// v's fan-out, of which child gets a share (nil at a leaf).
func (t *Task) BranchOf(v *Variant, child string) *Fanout {
	if !t.IsParallel(child) {
		return v.Fanout
	}
	f, ok := v.Branches[child]
	if !ok {
		f = copyBranch
	}
	return &f
}

// ProcessingBudgetMs is the time a chain's execution and hops may take under an SLO of sloMs: half of it, the other
// half being left for queueing, as Loki does. The allocation sizes batches and variants to it; the static plan's
// batch size too.
func ProcessingBudgetMs(sloMs float64) float64 { return sloMs / 2 }

// MaxPriority is the highest priority class a pipeline (Spec.Priority) or a request may have.
const MaxPriority = 9
