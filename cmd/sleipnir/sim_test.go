package main

import (
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/sim"
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
