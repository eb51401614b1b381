// Package deadline holds the decisions workers make about items running late, as Loki's section 5.2 defines them.
// Pure: the live workers and the simulator call the same functions.
package deadline

import (
	"fmt"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Policy is a pipeline's early-dropping policy.
type Policy string

// Policies.
const (
	// None never drops: late items run and arrive late (the baseline).
	None Policy = "none"
	// LastTask drops only at the last task, when the time left is less than the expected processing time.
	LastTask Policy = "last-task"
	// PerTask drops an item whose time at a task (queueing plus processing) exceeded the task's latency budget.
	PerTask Policy = "per-task"
	// Reroute sends an item that finished a task late by x to a downstream variant with spare capacity whose
	// profiled time is at most y - x (y: the time of the variant the routing table chose), the most accurate such
	// one; it drops the item only when there is none. An item is late when its time left is less than the time the
	// chosen variant and the tasks below it are allotted (see AfterTask).
	Reroute Policy = "reroute"
	// Degrade is reroute that answers instead of dropping (degrade.go): it decides as reroute does, and an item
	// reroute would drop for being late is answered with the result it already has (its parent's) when it has one.
	Degrade Policy = "degrade"
)

// Default is the policy of a pipeline that names none.
const Default = Reroute

// Policies lists every policy, for flags and docs.
var Policies = []Policy{None, LastTask, PerTask, Reroute, Degrade}

// ParsePolicy reads a policy name ("" is the default).
func ParsePolicy(s string) (Policy, error) {
	if s == "" {
		return Default, nil
	}
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("deadline policy %q: want none, last-task, per-task, reroute or degrade", s)
}

// Expired reports whether an item with left to its request's deadline can no longer be served: due now is too late.
func Expired(left time.Duration) bool { return left <= 0 }

// rule is a policy as the decisions branch on it (a string compared per item was a tenth of them in the simulator).
type rule uint8

const (
	ruleNone rule = iota
	ruleLastTask
	rulePerTask
	ruleReroute // reroute and degrade, which decides as reroute does
	ruleOther   // a policy no decision knows: keeps everything but expired items
)

func ruleOf(p Policy) rule {
	switch p {
	case None:
		return ruleNone
	case LastTask:
		return ruleLastTask
	case PerTask:
		return rulePerTask
	case Reroute, Degrade:
		return ruleReroute
	}
	return ruleOther
}

// Queued is where an item stands when a worker takes it from its variant's queue.
type Queued struct {
	// Left is the time left to its request's deadline.
	Left time.Duration
	// LastTask says the item is at a leaf task.
	LastTask bool
	// Expected is the task's profiled processing time of the item's batch (at most its budget, the time at the max
	// batch: Stage.BeforeExecute); Allowance the time the task is allotted (queueing and processing); Waited how long
	// the item has been queued.
	Expected, Allowance, Waited time.Duration
	// LeastRest is the least time allotted from the end of the task to the reply on a route the item is sure to
	// get: each task below at its slowest hosted variant (the routing table may choose any) or at a faster backup
	// this worker may still reroute to (its share of the backup's spare capacity is not used up), hops included
	// (see Stage.LeastRest). At the last task, the reply's hop.
	LeastRest time.Duration
}

// BeforeExecute decides whether to drop an item before executing it: "" keeps it, otherwise the reason (a
// wire.Drop* value). Dropping before a task rather than after it frees the task's capacity for items that can
// still make it.
//   - none runs everything, even past its deadline;
//   - every other policy drops an item whose deadline has passed;
//   - last-task drops an item at the last task with less time left than the task takes;
//   - per-task drops an item that will overrun its allotment at the task (it waited so long that waiting plus
//     processing exceeds it);
//   - reroute drops an item before a task that is not the last when, after the task, its time left could not
//     cover the least allotment below it is sure to get (LeastRest: the routing table's slowest choice, or a
//     faster backup this worker may still reroute to), and one at the last task with less time left than the
//     task takes and the reply's hop. One that overran its allotment here but has the time runs: a reroute after
//     the task may make up for it. Counting on a faster variant without capacity to spare would let an overloaded
//     queue grow until items ran this task only to be dropped after it for want of a backup.
//   - degrade decides as reroute does; the caller answers an item dropped for no-time-for-last or
//     no-faster-variant with the result it already has, when it has one (Answers).
func BeforeExecute(p Policy, q Queued) string { return beforeExecute(ruleOf(p), &q) }

func beforeExecute(r rule, q *Queued) string {
	switch {
	case r == ruleNone:
		return ""
	case Expired(q.Left):
		return wire.DropDeadline
	case r == ruleLastTask:
		if q.LastTask && q.Left < q.Expected {
			return wire.DropLastTask
		}
	case r == rulePerTask:
		if q.Waited+q.Expected-q.Allowance > 0 {
			return wire.DropBudget
		}
	case r == ruleReroute:
		switch {
		case q.LastTask && q.Left < q.Expected+q.LeastRest:
			return wire.DropLastTask
		case !q.LastTask && q.Left < q.Expected+q.LeastRest:
			return wire.DropNoFaster
		}
	}
	return ""
}

// Option is a downstream variant a late item may go to.
type Option struct {
	Variant  string
	Latency  time.Duration // profiled time at its max batch
	Accuracy float64
}

// Decision is what becomes of an item's sub-requests for one child task.
type Decision struct {
	// Variant is where they go; "" means they are dropped for Reason.
	Variant string
	Reason  string
	// Rerouted says Variant is a backup, not the routing table's choice.
	Rerouted bool
	// Degraded (policy degrade, with no Variant) says the sub-request is answered with its parent's result rather
	// than dropped for Reason.
	Degraded bool
}

// Progress is where an item stands when it has finished a task.
type Progress struct {
	// AtTask is the time it spent at the task (queueing and processing); Allowance the time the task is allotted.
	AtTask, Allowance time.Duration
	// Left is the time left to the item's deadline.
	Left time.Duration
	// Scale turns a profiled latency into allotted time (the plan's budget scale, at least 1); Rest is the time
	// allotted, for one child task, to the tasks below it and to the hops (publishing to the child, and so on down
	// to the reply).
	Scale float64
	Rest  time.Duration
}

// allotted is the time a sub-request sent to child variant o is allotted from now to its reply.
func (pr *Progress) allotted(o *Option) time.Duration {
	return time.Duration(float64(o.Latency)*max(pr.Scale, 1)) + pr.Rest
}

// AfterTask decides where an item's sub-requests for one child task go, when the routing table chose chosen.
// backups are the child task's variants with spare capacity that can take an item now; u in [0, 1) breaks ties
// between equally accurate ones.
// Per-task drops an item whose time at the task exceeded the task's allotment. Reroute keeps the chosen variant when
// the item's time left covers what it is allotted from here (Progress.allotted); otherwise the item is late by x,
// the difference, and goes to the most accurate backup whose allotment fits the time left, that is whose profiled
// time is at most y - x/Scale (y: the chosen one's profiled time; with Scale 1 this is the paper's y - x); it is
// dropped only when there is none. Lateness is measured against the deadline, not against the task's own share of
// the SLO: an item that overran this task's share but has time for the chosen variant below still makes its
// deadline, and dropping it (as per-task does) loses it for nothing.
func AfterTask(p Policy, pr Progress, chosen Option, backups []Option, u float64) Decision {
	return afterTask(ruleOf(p), &pr, &chosen, backups, u)
}

// withoutBackups is afterTask's decision where the backups do not matter (ok): a drop of the per-task rule, or the
// chosen variant kept (every rule but reroute keeps it; reroute, when it has the time).
func withoutBackups(r rule, pr *Progress, chosen *Option) (Decision, bool) {
	switch {
	case r == rulePerTask && pr.AtTask > pr.Allowance:
		return Decision{Reason: wire.DropBudget}, true
	case r != ruleReroute || pr.allotted(chosen) <= pr.Left:
		return Decision{Variant: chosen.Variant}, true
	}
	return Decision{}, false
}

func afterTask(r rule, pr *Progress, chosen *Option, backups []Option, u float64) Decision {
	if d, ok := withoutBackups(r, pr, chosen); ok {
		return d
	}
	return toBackup(pr, backups, u)
}

// toBackup is reroute's decision for a late item (withoutBackups not ok): the most accurate of backups whose
// allotment fits the time left (u breaks ties), or a drop when none does.
func toBackup(pr *Progress, backups []Option, u float64) Decision {
	var best []Option
	for i := range backups {
		b := &backups[i]
		if pr.allotted(b) > pr.Left {
			continue
		}
		switch {
		case len(best) == 0 || b.Accuracy > best[0].Accuracy:
			best = append(best[:0], *b)
		case b.Accuracy == best[0].Accuracy:
			best = append(best, *b)
		}
	}
	if len(best) == 0 {
		return Decision{Reason: wire.DropNoFaster}
	}
	pick := best[min(int(u*float64(len(best))), len(best)-1)]
	return Decision{Variant: pick.Variant, Rerouted: true}
}
