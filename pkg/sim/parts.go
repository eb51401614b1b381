package sim

import (
	"fmt"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/baseline"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// System is a serving policy under test: an allocator for the planner's loop and the workers' deadline policy.
type System struct {
	Name      string
	Allocator control.Allocator
	Policy    deadline.Policy
}

// SystemSyntax is the syntax of a system name, for flag help and errors.
const SystemSyntax = "loki, inferline, proteus or static, optionally with a deadline policy, e.g. loki:per-task " +
	"(defaults: loki and static the pipeline's deadline_policy, inferline none, proteus per-task)"

// ParseSystem reads a system name: "loki" (Sleipnir's planner: the allocation MILP), "inferline" or "proteus" (the
// baselines of pkg/baseline), or "static" (the pipeline's static allocation for good, routed as the demand
// moves: the live planner's --allocator static), optionally followed by ":" and a deadline policy. Without one,
// Loki and static run the pipeline's deadline policy; InferLine none (it provisions for the tail latency and drops
// nothing); Proteus per-task (it serves each task as a model of its own, with its own share of the SLO, and drops a
// query that overran it).
// The allocators size plans for the control loop's routing utilization (cc; zero values are its defaults).
func ParseSystem(s string, spec *pipeline.Spec, cc control.Config) (System, error) {
	name, pol, hasPolicy := strings.Cut(s, ":")
	cc.SetDefaults()
	// One branch-and-bound worker: with more, a solve may return another of several equally good plans, and the
	// simulator is deterministic.
	milp := control.MILP{Utilization: cc.RouteUtilization, Workers: 1}
	var sys System
	switch name {
	case "loki":
		sys.Allocator, sys.Policy = milp, deadline.Policy(spec.DeadlinePolicy)
		if sys.Policy == "" {
			sys.Policy = deadline.Default
		}
	case "inferline":
		sys.Allocator, sys.Policy = baseline.NewInferLine(milp), deadline.None
	case "proteus":
		sys.Allocator, sys.Policy = baseline.Proteus{MILP: milp}, deadline.PerTask
	case "static":
		sys.Policy = deadline.Policy(spec.DeadlinePolicy)
		if sys.Policy == "" {
			sys.Policy = deadline.Default
		}
	default:
		return System{}, fmt.Errorf("system %q: want %s", s, SystemSyntax)
	}
	if hasPolicy {
		p, err := deadline.ParsePolicy(pol)
		if err != nil || pol == "" {
			return System{}, fmt.Errorf("system %q: deadline policy %q: want none, last-task, per-task or reroute", s, pol)
		}
		sys.Policy = p
	}
	sys.Name = name + ":" + string(sys.Policy)
	return sys, nil
}

// eventHeap is a binary min-heap of events by time, then by the order they were pushed (so runs are
// deterministic). Written out rather than through container/heap to avoid boxing every event.
type eventHeap struct{ ev []event }

func (h *eventHeap) len() int { return len(h.ev) }

func less(a, b *event) bool { return a.at < b.at || a.at == b.at && a.seq < b.seq }

func (h *eventHeap) push(e event) {
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(&h.ev[i], &h.ev[p]) {
			break
		}
		h.ev[i], h.ev[p] = h.ev[p], h.ev[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	top := h.ev[0]
	n := len(h.ev) - 1
	h.ev[0] = h.ev[n]
	h.ev[n] = event{}
	h.ev = h.ev[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && less(&h.ev[r], &h.ev[l]) {
			c = r
		}
		if !less(&h.ev[c], &h.ev[i]) {
			break
		}
		h.ev[i], h.ev[c] = h.ev[c], h.ev[i]
		i = c
	}
	return top
}

// pathTrie numbers the paths of variants from the root (node 0 is the empty path) and caches each one's end-to-end
// accuracy (spec.PathAccuracyOf), so an item carries a node number instead of its path.
type pathTrie struct {
	spec  *pipeline.Spec
	hops  []*hop
	next  [][]int32 // node -> hop -> child node (0: not yet numbered)
	path  [][]string
	acc   []float64
	known []bool
}

func newPathTrie(spec *pipeline.Spec, hops []*hop) pathTrie {
	t := pathTrie{spec: spec, hops: hops}
	t.add(nil)
	return t
}

func (t *pathTrie) add(path []string) int32 {
	t.next = append(t.next, make([]int32, len(t.hops)))
	t.path = append(t.path, path)
	t.acc = append(t.acc, 0)
	t.known = append(t.known, false)
	return int32(len(t.next) - 1)
}

// child is the node of node's path followed by hop h.
func (t *pathTrie) child(node int32, h int32) int32 {
	if c := t.next[node][h]; c != 0 {
		return c
	}
	p := append(append([]string(nil), t.path[node]...), t.hops[h].name)
	c := t.add(p)
	t.next[node][h] = c
	return c
}

// accuracy is the end-to-end accuracy of a root-to-leaf path.
func (t *pathTrie) accuracy(node int32) float64 {
	if !t.known[node] {
		t.acc[node], t.known[node] = t.spec.PathAccuracyOf(t.path[node]), true
	}
	return t.acc[node]
}
