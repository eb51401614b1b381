package control

import (
	"flag"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/allocate"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
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

// TestCostCapFlag: --max-cost reaches the allocation MILP of the system, and a cap that cannot be planned (no
// prices, several pipelines, a negative cost) is refused before a run.
func TestCostCapFlag(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f := RegisterFlags(fs)
	if err := fs.Parse([]string{"--max-cost", "8"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config()
	if err != nil || cfg.MaxCostPerHour != 8 {
		t.Fatalf("--max-cost 8: %+v %v", cfg.MaxCostPerHour, err)
	}
	spec, err := pipeline.Load("../../examples/traffic-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sys, err := ParseSystem("loki", spec, cfg)
	if m, ok := sys.Allocator.(MILP); err != nil || !ok || m.MaxCostPerHour != 8 {
		t.Errorf("loki's allocator %#v (%v): want the MILP with the cap", sys.Allocator, err)
	}
	if cfg.CheckCostCap(1, true) != nil || cfg.CheckCostCap(1, false) == nil || cfg.CheckCostCap(2, true) == nil {
		t.Error("CheckCostCap: want it to accept one priced pipeline only")
	}
	if (Config{}).CheckCostCap(3, false) != nil {
		t.Error("no cap: nothing to check")
	}
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	f = RegisterFlags(fs)
	if err := fs.Parse([]string{"--max-cost", "-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Config(); err == nil {
		t.Error("--max-cost -1: no error")
	}
}
