package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/sim"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestParseCluster: --servers N keeps one class of N servers; CLASS=N,... and --price give a priced cluster; a
// price for a class without servers, or a bad count, is refused.
func TestParseCluster(t *testing.T) {
	c, err := parseCluster("20", "")
	if err != nil || c != nil || serversText(sim.Config{Servers: 20}) != "20 servers" {
		t.Errorf("--servers 20: %v %v", c, err)
	}
	c, err = parseCluster("cpu=16,fast=4", "cpu=0.4,fast=2.5")
	if err != nil || c.String() != "cpu=16,fast=4" || c.Price("fast") != 2.5 || c.Total() != 20 {
		t.Errorf("two classes: %+v %v", c, err)
	}
	if got := serversText(sim.Config{Cluster: c}); !strings.Contains(got, "cpu=16,fast=4") || !strings.Contains(got, "fast=2.5") {
		t.Errorf("named %q", got)
	}
	for _, bad := range [][2]string{{"cpu=16", "fast=2.5"}, {"0", ""}, {"cpu=x", ""}, {"cpu=2", "cpu=-1"}} {
		if _, err := parseCluster(bad[0], bad[1]); err == nil {
			t.Errorf("--servers %s --price %s: no error", bad[0], bad[1])
		}
	}
}

// TestSimEachPipelineItsOwnPolicy: with several pipelines, a bare --policy loki runs each pipeline under its own
// deadline_policy (traffic: reroute, social: last-task), not the first pipeline's for all (issue 48 item 0).
func TestSimEachPipelineItsOwnPolicy(t *testing.T) {
	specs, err := loadPipelinesCascades([]string{"../../examples/traffic.yaml", "../../examples/social.yaml"}, true)
	if err != nil {
		t.Fatal(err)
	}
	syss, err := systemNames([]string{"loki", "loki:reroute", "proteus"}, specs, control.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"loki", "loki:reroute", "proteus"}; !slices.Equal(syss, want) {
		t.Fatalf("systems %v, want %v (loki and loki:reroute differ on social)", syss, want)
	}
	if syss, _ := systemNames([]string{"loki", "loki:reroute"}, specs[:1], control.Config{}); len(syss) != 1 {
		t.Errorf("on traffic alone, loki and loki:reroute are one system: %v", syss)
	}
	base := sim.Config{Servers: 20, Seed: 1, CommLatency: -1}
	for _, spec := range specs {
		base.Pipelines = append(base.Pipelines, sim.Served{Spec: spec, Workload: workload.Constant(20, 3*time.Second)})
	}
	var got []string
	err = eachSystem(base, syss[:1], func(_ int, c sim.Config) error {
		res, err := sim.RunAll(c)
		for _, r := range res {
			got = append(got, r.Summary.Pipeline+" "+r.Summary.System)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"traffic loki:reroute", "social loki:last-task"}; !slices.Equal(got, want) {
		t.Errorf("simulated %v, want %v", got, want)
	}
}
