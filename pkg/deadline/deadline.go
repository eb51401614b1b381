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
	// one; it drops the item only when there is none.
	Reroute Policy = "reroute"
)

// Default is the policy of a pipeline that names none.
const Default = Reroute

// Policies lists every policy, for flags and docs.
var Policies = []Policy{None, LastTask, PerTask, Reroute}

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
	return "", fmt.Errorf("deadline policy %q: want none, last-task, per-task or reroute", s)
}

// Expired reports whether an item whose request is due at deadline can no longer be served at now.
func Expired(now, deadline time.Time) bool { return !now.Before(deadline) }

// BeforeExecute decides whether to drop an item before executing it: "" keeps it, otherwise the reason (a
// wire.Drop* value). lastTask says the item is at a leaf task; expected is the task's profiled processing time (its
// budget); waited is how long the item has been queued at the task, and allowance the time the task is allotted.
//   - none runs everything, even past its deadline;
//   - every other policy drops an item whose deadline has passed;
//   - last-task, and reroute (which is deadline-aware throughout), drop an item at the last task with less time left
//     than the task takes;
//   - per-task drops an item that has already spent more than its allotment at the task, queueing.
func BeforeExecute(p Policy, now, deadline time.Time, lastTask bool, expected, waited, allowance time.Duration) string {
	switch {
	case p == None:
		return ""
	case Expired(now, deadline):
		return wire.DropDeadline
	case (p == LastTask || p == Reroute) && lastTask && deadline.Sub(now) < expected:
		return wire.DropLastTask
	case p == PerTask && waited > allowance:
		return wire.DropBudget
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
}

// Progress is where an item stands when it has finished a task.
type Progress struct {
	// AtTask is the time it spent at the task (queueing and processing); Allowance the time the task was allotted.
	AtTask, Allowance time.Duration
	// Remaining is the time left until its deadline.
	Remaining time.Duration
	// Rest is the time allotted to the tasks after the child task (0 when the child is a leaf).
	Rest time.Duration
	// Scale turns a profiled latency into allotted time (the plan's budget scale, at least 1).
	Scale float64
}

// AfterTask decides where an item's sub-requests for one child task go, when the routing table chose chosen.
// backups are the child task's variants with spare capacity; u in [0, 1) breaks ties between equally accurate ones.
//
// Per-task drops the item when it overran its allowance at the task. Reroute measures how late the item is against
// its deadline: x is how much the time left falls short of what the rest of its path is allotted (the chosen
// variant's allotment plus Rest). On track (x <= 0), it goes where the table says; otherwise to the most accurate
// backup whose allotment is at most the chosen one's less x, that is whose profiled time is at most y - x/Scale
// (y: the chosen one's profiled time; with Scale 1 this is the paper's y - x); with none, it is dropped. Measuring
// against the deadline rather than the task's own budget lets an item that gained time upstream spend it.
func AfterTask(p Policy, pr Progress, chosen Option, backups []Option, u float64) Decision {
	switch p {
	case None, LastTask:
		return Decision{Variant: chosen.Variant}
	case PerTask:
		if pr.AtTask > pr.Allowance {
			return Decision{Reason: wire.DropBudget}
		}
		return Decision{Variant: chosen.Variant}
	}
	scale := max(pr.Scale, 1)
	need := time.Duration(float64(chosen.Latency)*scale) + pr.Rest
	late := need - pr.Remaining
	if late <= 0 {
		return Decision{Variant: chosen.Variant}
	}
	limit := chosen.Latency - time.Duration(float64(late)/scale)
	var best []Option
	for _, b := range backups {
		if b.Latency > limit {
			continue
		}
		switch {
		case len(best) == 0 || b.Accuracy > best[0].Accuracy:
			best = append(best[:0], b)
		case b.Accuracy == best[0].Accuracy:
			best = append(best, b)
		}
	}
	if len(best) == 0 {
		return Decision{Reason: wire.DropNoFaster}
	}
	pick := best[min(int(u*float64(len(best))), len(best)-1)]
	return Decision{Variant: pick.Variant, Rerouted: true}
}
