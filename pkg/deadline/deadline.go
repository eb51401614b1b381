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
// wire.Drop* value).
// lastTask says the item is at a leaf task; expected is the task's profiled processing time (its budget).
func BeforeExecute(p Policy, now, deadline time.Time, lastTask bool, expected time.Duration) string {
	switch {
	case p == None:
		return ""
	case Expired(now, deadline):
		return wire.DropDeadline
	case p == LastTask && lastTask && deadline.Sub(now) < expected:
		return wire.DropLastTask
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

// AfterTask decides where the sub-requests of an item that spent atTask at a task with latency budget budget go,
// when the routing table chose chosen. backups are the child task's variants with spare capacity; u in [0, 1)
// breaks ties between equally accurate ones.
func AfterTask(p Policy, atTask, budget time.Duration, chosen Option, backups []Option, u float64) Decision {
	late := atTask - budget
	if late <= 0 || p == None || p == LastTask {
		return Decision{Variant: chosen.Variant}
	}
	if p == PerTask {
		return Decision{Reason: wire.DropBudget}
	}
	// Reroute: the most accurate backup that makes up the time, ties broken by u.
	limit := chosen.Latency - late
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
