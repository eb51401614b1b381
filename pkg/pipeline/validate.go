package pipeline

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// validate checks what the schema cannot express. Every problem is reported, in the order of the spec's fields.
// checkClassProfiles checks the class profiles (validateClassProfiles) before parsing expands them.
func (s *Spec) checkClassProfiles() error {
	var errs []string
	add := func(path, format string, args ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, args...)) }
	batches, allowed := s.validateBatchSizes(func(string, string, ...any) {}) // validate says what is wrong
	s.validateClassProfiles(batches, allowed, add)
	if len(errs) > 0 {
		return errorList(errs)
	}
	return nil
}

func (s *Spec) validate() error {
	var errs []string
	add := func(path, format string, args ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, args...)) }

	batches, allowed := s.validateBatchSizes(add)
	if s.Priority < 0 || s.Priority > MaxPriority {
		add("priority", "%d: want a class from 0 to %d", s.Priority, MaxPriority)
	}
	if !(s.MinAccuracy >= 0 && s.MinAccuracy <= 1) {
		add("min_accuracy", "%v: want a system accuracy in (0, 1], or 0 for none", s.MinAccuracy)
	}
	tasks, roots := s.validateTree(add)
	s.validateVariants(batches, allowed, add)
	if len(roots) == 1 {
		s.validateJoins(roots[0], add)
	}
	for i, pa := range s.PathAccuracy {
		s.validatePath(pa.Path, fmt.Sprintf("path_accuracy[%d].path", i), roots, add)
		for j := 0; j < i; j++ {
			if strings.Join(s.PathAccuracy[j].Path, ",") == strings.Join(pa.Path, ",") {
				add(fmt.Sprintf("path_accuracy[%d]", i), "same path as path_accuracy[%d]", j)
			}
		}
	}
	s.validateAllocation(tasks, batches, allowed, add)
	validateTensorNames("inputs", s.Inputs, true, add)
	validateTensorNames("outputs", s.Outputs, false, add)
	if len(errs) > 0 {
		return errorList(errs)
	}
	return nil
}

// validateBatchSizes checks that the batch sizes increase, and returns them (default [1]) and their set.
func (s *Spec) validateBatchSizes(add func(string, string, ...any)) (batches []int, allowed map[int]bool) {
	batches = s.BatchSizes
	if len(batches) == 0 {
		batches = []int{1}
	}
	for i := 1; i < len(batches); i++ {
		if batches[i] <= batches[i-1] {
			add(fmt.Sprintf("batch_sizes[%d]", i), "%d does not follow %d: batch sizes must be strictly increasing", batches[i], batches[i-1])
		}
	}
	allowed = map[int]bool{}
	for _, b := range batches {
		allowed[b] = true
	}
	return batches, allowed
}

// validateTree checks that the tasks have distinct names and form one tree by their children. It returns the index
// of each task by name and the tasks without a parent (one, in a valid spec: the root).
func (s *Spec) validateTree(add func(string, string, ...any)) (tasks map[string]int, roots []string) {
	tasks = map[string]int{}
	for i, t := range s.Tasks {
		if j, dup := tasks[t.Name]; dup {
			add(fmt.Sprintf("tasks[%d].name", i), "task %q is also tasks[%d]", t.Name, j)
			continue
		}
		tasks[t.Name] = i
	}
	parent := map[string]string{}
	for i, t := range s.Tasks {
		seen := map[string]bool{}
		for j, c := range t.Children {
			p := fmt.Sprintf("tasks[%d].children[%d]", i, j)
			switch {
			case seen[c]:
				add(p, "child %q listed twice", c)
			case c == t.Name:
				add(p, "task %q lists itself as a child", c)
			default:
				if _, ok := tasks[c]; !ok {
					add(p, "no task named %q", c)
				} else if other, ok := parent[c]; ok && other != t.Name && s.Tasks[tasks[c]].Join == nil {
					add(p, "task %q already has parent %q: tasks must form a tree (only a join task has several)", c, other)
				} else {
					parent[c] = t.Name
				}
			}
			seen[c] = true
		}
	}
	for _, t := range s.Tasks {
		if _, ok := parent[t.Name]; !ok {
			roots = append(roots, t.Name)
		}
	}
	switch {
	case len(roots) == 0:
		add("tasks", "no root task: every task is some task's child (a cycle)")
	case len(roots) > 1:
		add("tasks", "%d root tasks (%s): exactly one task may have no parent", len(roots), strings.Join(roots, ", "))
	default:
		s.validateReachable(tasks, roots[0], add)
	}
	return tasks, roots
}

// validateReachable checks that every task hangs from the root: a cycle elsewhere leaves tasks unreachable.
func (s *Spec) validateReachable(tasks map[string]int, root string, add func(string, string, ...any)) {
	reached := map[string]bool{}
	var visit func(string)
	visit = func(n string) {
		if reached[n] {
			return
		}
		reached[n] = true
		if i, ok := tasks[n]; ok {
			for _, c := range s.Tasks[i].Children {
				visit(c)
			}
		}
	}
	visit(root)
	for i, t := range s.Tasks {
		if !reached[t.Name] {
			add(fmt.Sprintf("tasks[%d]", i), "task %q is not reachable from the root %q (a cycle)", t.Name, root)
		}
	}
}

// validateVariants checks each task's variants: distinct names, executor, fanout (exactly when the task has
// children) and profile.
func (s *Spec) validateVariants(batches []int, allowed map[int]bool, add func(string, string, ...any)) {
	for i, t := range s.Tasks {
		validateParallel(t, fmt.Sprintf("tasks[%d].parallel", i), add)
		validateBranchWeights(t, fmt.Sprintf("tasks[%d].branch_weights", i), add)
		variants := map[string]bool{}
		for j, v := range t.Variants {
			vp := fmt.Sprintf("tasks[%d].variants[%d]", i, j)
			if variants[v.Name] {
				add(vp+".name", "variant %q appears twice in task %q", v.Name, t.Name)
			}
			variants[v.Name] = true
			s.validateExecutor(t, v.Executor, vp+".executor", add)
			shared := t.SharedChildren()
			switch {
			case len(shared) > 0 && v.Fanout == nil:
				add(vp, "fanout is required: task %q has children", t.Name)
			case len(shared) == 0 && v.Fanout != nil && len(t.Children) > 0:
				add(vp+".fanout", "task %q sends every item to each of its children (parallel): no fan-out to split", t.Name)
			case len(shared) == 0 && v.Fanout != nil:
				add(vp+".fanout", "task %q has no children to fan out to", t.Name)
			case v.Fanout != nil:
				s.validateShares(t, v.Fanout, vp+".fanout", add)
				validateDispersion(v.Fanout, vp+".fanout", add)
			}
			validateBranches(t, v.Branches, vp+".branches", add)
			s.validateProfile(v.Profile, batches, allowed, vp+".profile", add)
			if v.Confidence != nil && v.Executor.Kind != ExecutorEmulated {
				add(vp+".confidence", "only emulated variants draw a confidence; %q reports its own", v.Name)
			}
		}
		if t.Cascade != nil {
			s.validateCascade(i, t, add)
		}
	}
}

// validateAllocation checks a static allocation: each entry names a variant of a task, once, at a batch size of
// batch_sizes.
func (s *Spec) validateAllocation(tasks map[string]int, batches []int, allowed map[int]bool,
	add func(string, string, ...any)) {
	placed := map[wire.VariantKey]int{}
	for i, a := range s.Allocation {
		p := fmt.Sprintf("allocation[%d]", i)
		ti, ok := tasks[a.Task]
		if !ok {
			add(p+".task", "no task named %q", a.Task)
			continue
		}
		if !hasVariant(&s.Tasks[ti], a.Variant) {
			add(p+".variant", "task %q has no variant %q", a.Task, a.Variant)
		}
		if !allowed[a.MaxBatch] {
			add(p+".max_batch", "%d is not in batch_sizes %v", a.MaxBatch, batches)
		}
		key := wire.VariantKey{Task: a.Task, Variant: a.Variant}
		if j, dup := placed[key]; dup {
			add(p, "%s is also allocation[%d]", key, j)
		}
		placed[key] = i
	}
}

// validateTensorNames refuses a declared tensor name used twice: a client could not tell the two apart. With
// alternatives, an input's name may be declared again with another datatype (a request carries one of them: OCR's
// image, encoded or as pixels); the datatype tells them apart.
func validateTensorNames(field string, ts []TensorSpec, alternatives bool, add func(string, string, ...any)) {
	seen := map[string]int{}
	for i, t := range ts {
		key := t.Name
		if alternatives {
			key += " " + t.Datatype
		}
		if j, dup := seen[key]; dup {
			add(fmt.Sprintf("%s[%d].name", field, i), "tensor %q is also %s[%d]", t.Name, field, j)
			continue
		}
		seen[key] = i
	}
}

// validateExecutor checks what the schema cannot: which fields go with which kind and program, and which programs fit
// where in the tree.
func (s *Spec) validateExecutor(t Task, e Executor, path string, add func(string, string, ...any)) {
	if e.Kind != ExecutorONNX {
		if e.Model != "" || e.Program != "" || e.InputSize != 0 || e.Threads != 0 {
			add(path, "model, program, input_size and threads are for kind onnx, not %q", e.Kind)
		}
		return
	}
	if e.Model == "" {
		add(path+".model", "an onnx executor needs the model file")
	}
	switch e.Program {
	case "", ProgramTensor:
		if len(t.Children) > 0 {
			add(path+".program", "program tensor emits no sub-requests: task %q has children", t.Name)
		}
	case ProgramOCRDetect:
		if len(t.Children) != 1 {
			add(path+".program", "program ocr-detect sends each line to one child task; task %q has %d", t.Name, len(t.Children))
		}
	case ProgramOCRRecognize:
		if len(t.Children) > 0 {
			add(path+".program", "program ocr-recognize ends a path: task %q has children", t.Name)
		}
	}
}

func hasVariant(t *Task, name string) bool {
	for _, v := range t.Variants {
		if v.Name == name {
			return true
		}
	}
	return false
}

// validateDispersion checks that a negative binomial has its dispersion, and that no other distribution has one.
func validateDispersion(f *Fanout, path string, add func(string, string, ...any)) {
	switch {
	case f.Distribution == FanoutNegativeBinomial && !(f.Dispersion > 0):
		add(path+".dispersion", "required and > 0 for distribution %q", FanoutNegativeBinomial)
	case f.Distribution != FanoutNegativeBinomial && f.Dispersion != 0:
		add(path+".dispersion", "only distribution %q has a dispersion", FanoutNegativeBinomial)
	}
}

// validateShares checks that f's shares split its sub-requests over the task's children that are not parallel.
func (s *Spec) validateShares(t Task, f *Fanout, path string, add func(string, string, ...any)) {
	shared := t.SharedChildren()
	if len(f.Shares) == 0 {
		if len(shared) > 1 {
			add(path+".shares", "required: task %q has %d children", t.Name, len(shared))
		}
		return
	}
	sum := 0.0
	for c, share := range f.Shares {
		switch {
		case !contains(t.Children, c):
			add(path+".shares."+c, "%q is not a child of task %q", c, t.Name)
		case t.IsParallel(c):
			add(path+".shares."+c, "%q is a parallel child of task %q: it gets every item, not a share", c, t.Name)
		}
		sum += share
	}
	for _, c := range shared {
		if _, ok := f.Shares[c]; !ok {
			add(path+".shares", "no share for child task %q", c)
		}
	}
	if math.Abs(sum-1) > 1e-6 {
		add(path+".shares", "shares sum to %.6g, want 1", sum)
	}
}

// validateJoins checks each join task (Task.Join) and the shape it closes: its parents, two at least, are the root's
// children, all parallel, and each sends every item to the join alone, one sub-request each (a fixed fan-out of 1),
// so that an item at the root becomes exactly one part per parent, which the frontend joins.
func (s *Spec) validateJoins(root string, add func(string, string, ...any)) {
	r := s.Task(root)
	for i, t := range s.Tasks {
		if t.Join == nil {
			continue
		}
		p := fmt.Sprintf("tasks[%d].join", i)
		switch m := t.Join.Mode; {
		case m != "" && m != JoinAll && m != JoinAny && m != JoinWindow:
			add(p+".mode", "%q: want %s, %s or %s", m, JoinAll, JoinAny, JoinWindow)
		case m == JoinWindow && !(t.Join.WindowMs > 0):
			add(p+".window_ms", "required and > 0 for mode %q", JoinWindow)
		case m != JoinWindow && t.Join.WindowMs != 0:
			add(p+".window_ms", "only mode %q has a window", JoinWindow)
		}
		// Below a join, a chain: the plan's model joins the chains through it exactly only then (pkg/allocate's
		// addJoinAgreement; with a branching below, the chains' agreements no longer make one assignment).
		below := &s.Tasks[i]
		for range s.Tasks { // at most as many steps as tasks, whatever cycle the other checks report
			if below == nil || len(below.Children) == 0 {
				break
			}
			if len(below.Children) > 1 {
				add(p, "task %q below join %q has %d children: below a join, each task has one child at most",
					below.Name, t.Name, len(below.Children))
				break
			}
			below = s.Task(below.Children[0])
		}
		parents := s.Parents(t.Name)
		if len(parents) < 2 {
			add(p, "task %q joins %d parents, want at least 2", t.Name, len(parents))
		}
		for _, parent := range parents {
			pt := s.Task(parent)
			switch {
			case !r.IsParallel(parent) || len(r.SharedChildren()) > 0:
				add(p, "parent %q of join %q: a join's parents are the root's children, all parallel", parent, t.Name)
			case len(pt.Children) != 1:
				add(p, "parent %q of join %q has other children: its items go to the join alone", parent, t.Name)
			default:
				for _, v := range pt.Variants {
					if f := v.Fanout; f != nil && (f.Mean != 1 || f.Distribution != FanoutFixed) {
						add(p, "parent %q of join %q: variant %q must send each item once (fanout: {mean: 1, "+
							"distribution: fixed})", parent, t.Name, v.Name)
					}
				}
			}
		}
	}
}

// validateParallel checks a task's parallel children: each one of its children, once.
func validateParallel(t Task, path string, add func(string, string, ...any)) {
	for j, c := range t.Parallel {
		switch {
		case !contains(t.Children, c):
			add(fmt.Sprintf("%s[%d]", path, j), "%q is not a child of task %q", c, t.Name)
		case contains(t.Parallel[:j], c):
			add(fmt.Sprintf("%s[%d]", path, j), "%q listed twice", c)
		}
	}
}

// validateBranches checks a variant's own fan-outs of parallel children: each to a parallel child, with no shares
// (a branch goes to one child) and its distribution's parameters.
func validateBranches(t Task, branches map[string]Fanout, path string, add func(string, string, ...any)) {
	for _, c := range slices.Sorted(maps.Keys(branches)) {
		f := branches[c]
		if !t.IsParallel(c) {
			add(path+"."+c, "%q is not a parallel child of task %q", c, t.Name)
		}
		if len(f.Shares) > 0 {
			add(path+"."+c+".shares", "a branch goes to its one child: no shares")
		}
		validateDispersion(&f, path+"."+c, add)
	}
}

func (s *Spec) validateProfile(profile []ProfilePoint, batches []int, allowed map[int]bool, path string, add func(string, string, ...any)) {
	listed := map[int]bool{}
	for k, pt := range profile {
		pp := fmt.Sprintf("%s[%d]", path, k)
		if !allowed[pt.Batch] {
			add(pp+".batch", "%d is not in batch_sizes %v", pt.Batch, batches)
		}
		if listed[pt.Batch] {
			add(pp+".batch", "batch size %d listed twice", pt.Batch)
		}
		listed[pt.Batch] = true
		if pt.P95Ms < pt.P50Ms {
			add(pp+".p95_ms", "%g is below p50_ms %g", pt.P95Ms, pt.P50Ms)
		}
		if pt.P99Ms != 0 && pt.P99Ms < pt.P95Ms {
			add(pp+".p99_ms", "%g is below p95_ms %g", pt.P99Ms, pt.P95Ms)
		}
		if k > 0 {
			prev := profile[k-1]
			if pt.Batch < prev.Batch {
				add(pp+".batch", "%d follows %d: list batch sizes in increasing order", pt.Batch, prev.Batch)
			} else if pt.P50Ms < prev.P50Ms {
				add(pp+".p50_ms", "%g is below the %g of batch %d: latency cannot fall as the batch grows", pt.P50Ms, prev.P50Ms, prev.Batch)
			}
		}
	}
	for _, b := range batches {
		if !listed[b] {
			add(path, "batch size %d missing", b)
		}
	}
}

func (s *Spec) validatePath(path []string, at string, roots []string, add func(string, string, ...any)) {
	if len(roots) != 1 {
		return
	}
	expect := []string{roots[0]}
	for k, entry := range path {
		p := fmt.Sprintf("%s[%d]", at, k)
		key, err := wire.ParseVariantKey(entry)
		if err != nil { // the schema's pattern catches it in a file; a Spec built in code may not have met it
			add(p, "%v", err)
			return
		}
		task, variant := key.Task, key.Variant
		t := s.Task(task)
		switch {
		case !contains(expect, task):
			add(p, "task %q cannot come here (want one of %s)", task, strings.Join(expect, ", "))
			return
		case !hasVariant(t, variant):
			add(p, "task %q has no variant %q", task, variant)
			return
		}
		expect = t.Children
	}
	if len(expect) > 0 {
		add(at, "ends before a leaf task (next would be one of %s)", strings.Join(expect, ", "))
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
