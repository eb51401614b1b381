package deadline

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

const ms = time.Millisecond

func TestExpired(t *testing.T) {
	for _, tc := range []struct {
		left time.Duration
		want bool
	}{
		{-time.Nanosecond, true},
		{0, true}, // due now: too late to execute
		{time.Nanosecond, false},
	} {
		if got := Expired(tc.left); got != tc.want {
			t.Errorf("Expired(%v) = %v", tc.left, got)
		}
	}
}

func TestBeforeExecute(t *testing.T) {
	// The task takes 20 ms and is allotted 40; the least rest the item is sure to get below is allotted 30 ms (at
	// the last task: the reply's hop, 1 ms).
	q := func(left time.Duration, lastTask bool, waited time.Duration) Queued {
		rest := 30 * ms
		if lastTask {
			rest = ms
		}
		return Queued{Left: left, LastTask: lastTask, Expected: 20 * ms,
			Allowance: 40 * ms, Waited: waited, LeastRest: rest}
	}
	tests := []struct {
		name   string
		policy Policy
		q      Queued
		want   string
	}{
		{"none runs even expired items", None, q(-ms, true, time.Second), ""},
		{"per-task drops expired", PerTask, q(-ms, false, 0), wire.DropDeadline},
		{"reroute drops expired", Reroute, q(0, false, 0), wire.DropDeadline},
		{"last-task: enough time", LastTask, q(30*ms, true, 0), ""},
		{"last-task: too little time at the last task", LastTask, q(10*ms, true, 0), wire.DropLastTask},
		{"last-task: too little time, but not the last task", LastTask, q(10*ms, false, 0), ""},
		{"last-task: waiting long is no reason", LastTask, q(time.Second, false, time.Second), ""},
		{"per-task does not look ahead", PerTask, q(10*ms, true, 0), ""},
		{"per-task: will overrun its allotment", PerTask, q(time.Second, false, 21*ms), wire.DropBudget},
		{"per-task: will just make its allotment", PerTask, q(time.Second, false, 20*ms), ""},
		{"reroute: too little time at the last task", Reroute, q(10*ms, true, 0), wire.DropLastTask},
		{"reroute: at the last task, time for the task and the reply", Reroute, q(21*ms, true, 0), ""},
		{"reroute: at the last task, time for the task only", Reroute, q(20*ms, true, 0), wire.DropLastTask},
		{"reroute: time for this task and the least rest", Reroute, q(50*ms, false, 0), ""},
		{"reroute: no time even for the least rest", Reroute, q(49*ms, false, 0), wire.DropNoFaster},
		{"reroute: an overrun of the allotment with time left runs", Reroute, q(time.Second, false, 500*ms), ""},
		{"reroute: at the last task, an overrun with time left runs", Reroute, q(time.Second, true, 500*ms), ""},
	}
	for _, tc := range tests {
		if got := BeforeExecute(tc.policy, tc.q); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestAfterTask(t *testing.T) {
	chosen := Option{Variant: "slow", Latency: 100 * ms, Accuracy: 0.9}
	backups := []Option{
		{Variant: "mid", Latency: 60 * ms, Accuracy: 0.8},
		{Variant: "fast", Latency: 10 * ms, Accuracy: 0.6},
		{Variant: "fast2", Latency: 10 * ms, Accuracy: 0.6},
	}
	// left: the item has that much time left; allotments are profiled times (scale 1) and nothing is allotted below
	// the child. It spent 20 ms at the task, all of its allotment.
	left := func(d time.Duration) Progress {
		return Progress{AtTask: 20 * ms, Allowance: 20 * ms, Left: d, Scale: 1}
	}
	overran := Progress{AtTask: 500 * ms, Allowance: 20 * ms, Left: time.Second, Scale: 1}
	// Scale 2 and 5 ms allotted below the child: slow is allotted 205 ms, mid 125, fast 25.
	scaled := func(d time.Duration) Progress {
		return Progress{AtTask: 20 * ms, Allowance: 20 * ms, Left: d, Scale: 2, Rest: 5 * ms}
	}
	tests := []struct {
		name         string
		policy       Policy
		pr           Progress
		backups      []Option
		u            float64
		want, reason string
		rerouted     bool
	}{
		{"in time: the table's choice", Reroute, left(100 * ms), backups, 0, "slow", "", false},
		{"none forwards late items", None, left(10 * ms), backups, 0, "slow", "", false},
		{"last-task forwards late items", LastTask, left(10 * ms), backups, 0, "slow", "", false},
		{"per-task drops an item that overran its allotment", PerTask, overran, backups, 0, "", wire.DropBudget, false},
		{"per-task keeps one within it, however late", PerTask, left(10 * ms), backups, 0, "slow", "", false},
		// late by 30: y - x = 70 admits mid (60), the most accurate that fits.
		{"reroute: most accurate that makes up the time", Reroute, left(70 * ms), backups, 0, "mid", "", true},
		// late by 60: y - x = 40 admits only the two fast ones; u breaks the tie.
		{"reroute: tie broken by u (low)", Reroute, left(40 * ms), backups, 0.2, "fast", "", true},
		{"reroute: tie broken by u (high)", Reroute, left(40 * ms), backups, 0.7, "fast2", "", true},
		{"reroute: exactly y - x fits", Reroute, left(10 * ms), backups, 0, "fast", "", true},
		{"reroute: nothing fast enough", Reroute, left(9 * ms), backups, 0, "", wire.DropNoFaster, false},
		{"reroute: no backups", Reroute, left(70 * ms), nil, 0, "", wire.DropNoFaster, false},
		{"reroute: overran the task's allotment, in time for the choice", Reroute, overran, backups, 0, "slow", "",
			false},
		{"reroute: scaled, in time", Reroute, scaled(205 * ms), backups, 0, "slow", "", false},
		{"reroute: scaled, late", Reroute, scaled(204 * ms), backups, 0, "mid", "", true},
		{"reroute: scaled, later", Reroute, scaled(124 * ms), backups, 0, "fast", "", true},
		{"reroute: scaled, too late", Reroute, scaled(24 * ms), backups, 0, "", wire.DropNoFaster, false},
	}
	for _, tc := range tests {
		d := AfterTask(tc.policy, tc.pr, chosen, tc.backups, tc.u)
		if d.Variant != tc.want || d.Reason != tc.reason || d.Rerouted != tc.rerouted {
			t.Errorf("%s: %+v, want variant %q reason %q rerouted %v", tc.name, d, tc.want, tc.reason, tc.rerouted)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	if p, err := ParsePolicy(""); err != nil || p != Reroute {
		t.Errorf("default: %v %v", p, err)
	}
	for _, p := range Policies {
		if got, err := ParsePolicy(string(p)); err != nil || got != p {
			t.Errorf("%s: %v %v", p, got, err)
		}
	}
	if _, err := ParsePolicy("drop-all"); err == nil {
		t.Error("an unknown policy was accepted")
	}
}
