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
		want     string
	}{
		{"none runs even expired items", None, -ms, true, ""},
		{"per-task drops expired", PerTask, -ms, false, wire.DropDeadline},
		{"reroute drops expired", Reroute, 0, false, wire.DropDeadline},
		{"last-task: enough time", LastTask, 30 * ms, true, ""},
		{"last-task: too little time at the last task", LastTask, 10 * ms, true, wire.DropLastTask},
		{"last-task: too little time, but not the last task", LastTask, 10 * ms, false, ""},
		{"per-task does not look ahead", PerTask, 10 * ms, true, ""},
	}
	for _, tc := range tests {
		if got := BeforeExecute(tc.policy, now, now.Add(tc.left), tc.lastTask, 20*ms); got != tc.want {
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
	tests := []struct {
		name         string
		policy       Policy
		atTask       time.Duration // budget is 20 ms
		backups      []Option
		u            float64
		want, reason string
		rerouted     bool
	}{
		{"on time: the table's choice", Reroute, 20 * ms, backups, 0, "slow", "", false},
		{"none forwards late items", None, 200 * ms, backups, 0, "slow", "", false},
		{"last-task forwards late items", LastTask, 200 * ms, backups, 0, "slow", "", false},
		{"per-task drops late items", PerTask, 21 * ms, backups, 0, "", wire.DropBudget, false},
		// late by 30: y - x = 70 admits mid (60), the most accurate that fits.
		{"reroute: most accurate that makes up the time", Reroute, 50 * ms, backups, 0, "mid", "", true},
		// late by 60: y - x = 40 admits only the two fast ones; u breaks the tie.
		{"reroute: tie broken by u (low)", Reroute, 80 * ms, backups, 0.2, "fast", "", true},
		{"reroute: tie broken by u (high)", Reroute, 80 * ms, backups, 0.7, "fast2", "", true},
		{"reroute: exactly y - x fits", Reroute, 110 * ms, backups, 0, "fast", "", true},
		{"reroute: nothing fast enough", Reroute, 111 * ms, backups, 0, "", wire.DropNoFaster, false},
		{"reroute: no backups", Reroute, 50 * ms, nil, 0, "", wire.DropNoFaster, false},
	}
	for _, tc := range tests {
		d := AfterTask(tc.policy, tc.atTask, 20*ms, chosen, tc.backups, tc.u)
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
