package control

import (
	"flag"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
)

func TestParseSystem(t *testing.T) {
	spec := trafficSpec(t)
	for in, want := range map[string]string{"loki": "loki:reroute", "loki:none": "loki:none",
		"inferline": "inferline:none", "proteus": "proteus:per-task", "proteus:reroute": "proteus:reroute",
		"static": "static:reroute", "static:none": "static:none"} {
		s, err := ParseSystem(in, spec, Config{})
		if err != nil || s.Name != want {
			t.Errorf("%q: %q %v, want %q", in, s.Name, err, want)
		}
		if (s.Allocator == nil) != (in == "static" || in == "static:none") {
			t.Errorf("%q: allocator %T", in, s.Allocator)
		}
	}
	for _, bad := range []string{"", "clipper", "loki:", "loki:sometimes", "milp"} {
		if _, err := ParseSystem(bad, spec, Config{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// The allocators solve as the configuration says.
	s, err := ParseSystem("proteus", spec, Config{RouteUtilization: 0.7, SolveTimeLimit: time.Second, SolveWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Allocator.(Proteus).MILP, (MILP{Utilization: 0.7, TimeLimit: time.Second, Workers: 2}); got != want {
		t.Errorf("proteus solves with %+v, want %+v", got, want)
	}
	if _, ok := s.Allocator.(Router); !ok {
		t.Error("proteus does not route its own way")
	}
}

// TestFlags: the control flags give the loop's configuration and the systems, and refuse what is not one.
func TestFlags(t *testing.T) {
	parse := func(args ...string) (*Flags, Config, error) {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		f := RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		c, err := f.Config()
		return f, c, err
	}
	f, c, err := parse("--policy", "proteus:none, static", "--headroom", "0", "--solve-time-limit", "2s",
		"--utilization", "0.8", "--replan-every", "5s")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Headroom: -1, SolveTimeLimit: 2 * time.Second, RouteUtilization: 0.8, ReplanEvery: 5 * time.Second,
		LatencyModel: allocate.LatencyBurst, CheckTarget: DefaultCheckTarget}
	if c != want {
		t.Errorf("config %+v, want %+v", c, want)
	}
	if got := f.Systems(); len(got) != 2 || got[0] != "proteus:none" || got[1] != "static" {
		t.Errorf("systems %q", got)
	}
	if _, err := f.System(); err == nil {
		t.Error("two systems for a planner: no error")
	}
	if f, _, _ = parse("--policy", "milp"); f != nil {
		if _, err := f.System(trafficSpec(t)); err == nil {
			t.Error("--policy milp: no error")
		}
	}
	// The paper's model reaches the allocator, and plans with the profiles.
	_, c, err = parse("--latency-model", "loki")
	if err != nil {
		t.Fatal(err)
	}
	sys, err := ParseSystem("loki", trafficSpec(t), c)
	if err != nil {
		t.Fatal(err)
	}
	if m := sys.Allocator.(MILP); m.LatencyModel != allocate.LatencyLoki {
		t.Errorf("--latency-model loki: the allocator solves with %q", m.LatencyModel)
	}
	if c.SetDefaults(); !c.ProfilesOnly {
		t.Error("--latency-model loki plans with measured latencies; the paper's model takes the profiles")
	}
	f, c, _ = parse()
	if s, err := f.System(); s != "loki" || err != nil || c.Headroom != DefaultHeadroom {
		t.Errorf("defaults: system %q %v, headroom %v", s, err, c.Headroom)
	}
	for _, bad := range [][]string{{"--headroom", "-1"}, {"--utilization", "1.5"}, {"--solve-workers", "-1"},
		{"--solve-time-limit", "-1s"}, {"--replan-sigmas", "-1"}, {"--latency-model", "paper"},
		{"--check-target", "0"}, {"--check-target", "1"}} {
		if _, _, err := parse(bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
