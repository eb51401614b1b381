package deadline

import (
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

const ms = time.Millisecond

func TestExpired(t *testing.T) {
	now := time.Unix(100, 0)
	for _, tc := range []struct {
		deadline time.Time
		want     bool
	}{
		{now.Add(-time.Nanosecond), true},
		{now, true}, // due now: too late to execute
		{now.Add(time.Nanosecond), false},
	} {
		if got := Expired(now, tc.deadline); got != tc.want {
			t.Errorf("Expired(now, now%+v) = %v", tc.deadline.Sub(now), got)
		}
	}
}

func TestBeforeExecute(t *testing.T) {
	now := time.Unix(100, 0)
	tests := []struct {
		name     string
		policy   Policy
		left     time.Duration // deadline - now
		lastTask bool
		waited   time.Duration // the allotment is 40 ms, the expected processing time 20 ms
		want     string
	}{
		{"none runs even expired items", None, -ms, true, time.Second, ""},
		{"per-task drops expired", PerTask, -ms, false, 0, wire.DropDeadline},
		{"reroute drops expired", Reroute, 0, false, 0, wire.DropDeadline},
		{"last-task: enough time", LastTask, 30 * ms, true, 0, ""},
		{"last-task: too little time at the last task", LastTask, 10 * ms, true, 0, wire.DropLastTask},
		{"last-task: too little time, but not the last task", LastTask, 10 * ms, false, 0, ""},
		{"last-task: waiting long is no reason", LastTask, time.Second, false, time.Second, ""},
		{"reroute: too little time at the last task", Reroute, 10 * ms, true, 0, wire.DropLastTask},
		{"reroute: too little time, but not the last task", Reroute, 10 * ms, false, 0, ""},
		{"per-task does not look ahead", PerTask, 10 * ms, true, 0, ""},
		{"per-task: queued past the allotment", PerTask, time.Second, false, 41 * ms, wire.DropBudget},
		{"per-task: queued within the allotment", PerTask, time.Second, false, 40 * ms, ""},
	}
	for _, tc := range tests {
		if got := BeforeExecute(tc.policy, now, now.Add(tc.left), tc.lastTask, 20*ms, tc.waited, 40*ms); got != tc.want {
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
	// paper: scale 1, nothing after the child, so the item is late by x when 100 ms - x are left.
	paper := func(atTask, left time.Duration) Progress {
		return Progress{AtTask: atTask, Allowance: 20 * ms, Remaining: left, Scale: 1}
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
		{"on time: the table's choice", Reroute, paper(20*ms, 100*ms), backups, 0, "slow", "", false},
		{"none forwards late items", None, paper(200*ms, 0), backups, 0, "slow", "", false},
		{"last-task forwards late items", LastTask, paper(200*ms, 0), backups, 0, "slow", "", false},
		{"per-task drops items over their allowance", PerTask, paper(21*ms, time.Second), backups, 0, "", wire.DropBudget, false},
		{"per-task keeps items within it", PerTask, paper(20*ms, 0), backups, 0, "slow", "", false},
		// Over its allowance at this task, but with time in hand from upstream: still on track.
		{"reroute: time gained upstream is spent", Reroute, paper(50*ms, 100*ms), backups, 0, "slow", "", false},
		// late by 30: y - x = 70 admits mid (60), the most accurate that fits.
		{"reroute: most accurate that makes up the time", Reroute, paper(50*ms, 70*ms), backups, 0, "mid", "", true},
		// late by 60: y - x = 40 admits only the two fast ones; u breaks the tie.
		{"reroute: tie broken by u (low)", Reroute, paper(80*ms, 40*ms), backups, 0.2, "fast", "", true},
		{"reroute: tie broken by u (high)", Reroute, paper(80*ms, 40*ms), backups, 0.7, "fast2", "", true},
		{"reroute: exactly y - x fits", Reroute, paper(110*ms, 10*ms), backups, 0, "fast", "", true},
		{"reroute: nothing fast enough", Reroute, paper(111*ms, 9*ms), backups, 0, "", wire.DropNoFaster, false},
		{"reroute: no backups", Reroute, paper(50*ms, 70*ms), nil, 0, "", wire.DropNoFaster, false},
		// Scale 2, 50 ms allotted after the child: slow needs 200 + 50; with 230 left it is late by 20, which a
		// backup makes up with a profiled time of at most 100 - 20/2 = 90: mid.
		{"reroute: allotments scaled, tasks after the child", Reroute,
			Progress{AtTask: 30 * ms, Allowance: 40 * ms, Remaining: 230 * ms, Rest: 50 * ms, Scale: 2}, backups, 0, "mid", "", true},
		{"reroute: scaled, on track", Reroute,
			Progress{AtTask: 60 * ms, Allowance: 40 * ms, Remaining: 250 * ms, Rest: 50 * ms, Scale: 2}, backups, 0, "slow", "", false},
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
