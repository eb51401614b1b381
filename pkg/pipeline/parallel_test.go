package pipeline

import (
	"math"
	"strings"
	"testing"
)

// parallelBase is base (pipeline_test.go) with face a parallel child of det: every item goes to face once, and
// det's fan-out goes to cls alone.
var parallelBase = strings.NewReplacer(
	"    children: [cls, face]\n", "    children: [cls, face]\n    parallel: [face]\n",
	"shares: {cls: 0.7, face: 0.3}", "shares: {cls: 1}",
	"fanout: {mean: 2, shares: {cls: 0.5, face: 0.5}}", "fanout: {mean: 2}\n        branches: {face: {mean: 3, distribution: fixed}}",
).Replace(base)

// TestParallel: a parallel child's factor is one copy per item, or its branch's own mean; the other children share
// the fan-out; a measured factor (what each child got) overrides both.
func TestParallel(t *testing.T) {
	s, err := Parse([]byte(parallelBase))
	if err != nil {
		t.Fatal(err)
	}
	det := s.Task("det")
	big, small := s.Variant("det", "big"), s.Variant("det", "small")
	for _, tc := range []struct {
		v     *Variant
		child string
		want  float64
	}{{big, "face", 1}, {big, "cls", 3}, {small, "face", 3}, {small, "cls", 2}} {
		if got := det.FanoutTo(tc.v, tc.child, nil); got != tc.want {
			t.Errorf("%s to %s: %v, want %v", tc.v.Name, tc.child, got, tc.want)
		}
	}
	if got := det.FanoutTo(big, "face", map[string]Fanout{"det/big": {Mean: 4, Shares: map[string]float64{"cls": 0.75, "face": 0.25}}}); got != 1 {
		t.Errorf("measured: %v to face, want 1", got)
	}
	if f := det.BranchOf(big, "face"); f.Mean != 1 || f.Distribution != FanoutFixed {
		t.Errorf("a parallel child without a branch: %+v, want one copy", f)
	}
	if f := det.BranchOf(small, "face"); f.Mean != 3 || f.Distribution != FanoutFixed {
		t.Errorf("a parallel child with a branch: %+v", f)
	}
	if big.Fanout.Shares["cls"] != 1 || strings.Join(det.SharedChildren(), ",") != "cls" {
		t.Errorf("shared children %v, shares %v", det.SharedChildren(), big.Fanout.Shares)
	}
}

// TestParallelErrors: each mistake in parallel children and branches is named.
func TestParallelErrors(t *testing.T) {
	for _, tc := range []struct{ name, old, new, want string }{
		{"parallel not a child", "parallel: [face]", "parallel: [face, nope]", `tasks[0].parallel[1]: "nope" is not a child of task "det"`},
		{"parallel twice", "parallel: [face]", "parallel: [face, face]", `tasks[0].parallel[1]: "face" listed twice`},
		{"share of a parallel child", "shares: {cls: 1}", "shares: {cls: 0.5, face: 0.5}", `tasks[0].variants[0].fanout.shares.face: "face" is a parallel child`},
		{"fanout with every child parallel", "parallel: [face]", "parallel: [face, cls]", `tasks[0].variants[0].fanout: task "det" sends every item to each of its children (parallel)`},
		{"branch to a shared child", "branches: {face:", "branches: {cls: {mean: 1}, face:", `tasks[0].variants[1].branches.cls: "cls" is not a parallel child`},
		{"branch with shares", "{mean: 3, distribution: fixed}", "{mean: 3, distribution: fixed, shares: {face: 1}}", "tasks[0].variants[1].branches.face.shares: a branch goes to its one child"},
		{"branch dispersion", "{mean: 3, distribution: fixed}", "{mean: 3, distribution: negative-binomial}", "tasks[0].variants[1].branches.face.dispersion: required"},
		{"unknown field in a branch", "{mean: 3, distribution: fixed}", "{mean: 3, copies: 2}", "additional properties 'copies' not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) { expectParseError(t, parallelBase, tc.old, tc.new, tc.want) })
	}
}

// joinSpec: the root's two parallel children joined by merge.
const joinSpec = `
name: j
slo_ms: 500
tasks:
  - name: img
    children: [det, cap]
    parallel: [det, cap]
    variants:
      - {name: i, accuracy: 1, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 1, p95_ms: 1}]}
  - name: det
    children: [merge]
    variants:
      - {name: d, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1, distribution: fixed}, profile: [{batch: 1, p50_ms: 1, p95_ms: 1}]}
  - name: cap
    children: [merge]
    variants:
      - {name: c, accuracy: 0.8, executor: {kind: emulated}, fanout: {mean: 1, distribution: fixed}, profile: [{batch: 1, p50_ms: 1, p95_ms: 1}]}
  - name: merge
    join: {mode: all}
    variants:
      - {name: m, accuracy: 1, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 1, p95_ms: 1}]}
`

// TestJoin: a join task may have several parents; the chains run through it from each; each mistake in the shape
// a join closes is named.
func TestJoin(t *testing.T) {
	s, err := Parse([]byte(joinSpec))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Parents("merge"), ","); got != "det,cap" || s.JoinAfter("det").Name != "merge" ||
		s.JoinAfter("img") != nil || len(s.Chains()) != 2 {
		t.Errorf("parents %s, chains %v", got, s.Chains())
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"two parents, no join", "    join: {mode: all}\n", "", `task "merge" already has parent "det": tasks must form a tree`},
		{"unknown mode", "mode: all", "mode: inner", "tasks[3].join.mode: value must be one of"},
		{"window without its time", "mode: all", "mode: window", "tasks[3].join.window_ms: required"},
		{"time without a window", "mode: all", "mode: any, window_ms: 5", `tasks[3].join.window_ms: only mode "window"`},
		{"a parent not parallel", "parallel: [det, cap]", "parallel: [det]", `parent "cap" of join "merge": a join's parents are the root's children, all parallel`},
		{"a parent's fan-out", "name: c, accuracy: 0.8, executor: {kind: emulated}, fanout: {mean: 1,", "name: c, accuracy: 0.8, executor: {kind: emulated}, fanout: {mean: 2,", `variant "c" must send each item once`},
		{"one parent", "    children: [merge]\n    variants:\n      - {name: c", "    variants:\n      - {name: c", `task "merge" joins 1 parents, want at least 2`},
		{"a branching below", "    join: {mode: all}\n", "    join: {mode: all}\n    children: [x, y]\n", `task "merge" below join "merge" has 2 children`},
	} {
		t.Run(tc.name, func(t *testing.T) { expectParseError(t, joinSpec, tc.old, tc.new, tc.want) })
	}
}

// expectParseError parses base with old replaced by new, and wants an error that says want.
func expectParseError(t *testing.T, base, old, new, want string) {
	t.Helper()
	spec := strings.Replace(base, old, new, 1)
	if spec == base {
		t.Fatalf("%q not in the spec", old)
	}
	if _, err := Parse([]byte(spec)); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want %q", err, want)
	}
}

// TestBranchWeights: a request's leaves are weighed by their branch's weight over the even share of its copy, on the
// join's path as on the branch's own; each mistake in the weights is named.
func TestBranchWeights(t *testing.T) {
	weighted := strings.Replace(joinSpec, "    parallel: [det, cap]\n", "    parallel: [det, cap]\n    branch_weights: {det: 0.7, cap: 0.3}\n", 1)
	s, err := Parse([]byte(weighted))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path []string
		want float64
	}{
		{[]string{"img/i", "det/d", "merge/m"}, 1.4},
		{[]string{"img/i", "cap/c"}, 0.6},
		{[]string{"img/i"}, 1},
	} {
		if got := s.LeafWeight(tc.path); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("LeafWeight(%v) = %v, want %v", tc.path, got, tc.want)
		}
	}
	plain, err := Parse([]byte(joinSpec))
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.LeafWeight([]string{"img/i", "det/d", "merge/m"}); got != 1 {
		t.Errorf("without weights: %v, want 1", got)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"not summing to 1", "det: 0.7", "det: 0.6", "branch weights sum to 0.9, want 1"},
		{"a branch missing", "{det: 0.7, cap: 0.3}", "{det: 1}", `no weight for branch "cap"`},
		{"not a child", "{det: 0.7, cap: 0.3}", "{det: 0.7, cap: 0.2, x: 0.1}", `"x" is not a child of task "img"`},
		{"a shared child", "parallel: [det, cap]", "parallel: [det]", "branch weights need every child parallel"},
	} {
		t.Run(tc.name, func(t *testing.T) { expectParseError(t, weighted, tc.old, tc.new, tc.want) })
	}
}
