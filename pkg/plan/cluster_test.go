package plan

import (
	"slices"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func TestParseCluster(t *testing.T) {
	s, err := ParseServers("20")
	if err != nil || s[wire.DefaultClass] != 20 || len(s) != 1 {
		t.Fatalf("ParseServers(20) = %v, %v", s, err)
	}
	s, err = ParseServers("fast=4, cpu=16")
	if err != nil || s["cpu"] != 16 || s["fast"] != 4 {
		t.Fatalf("ParseServers = %v, %v", s, err)
	}
	p, err := ParsePrices("cpu=0.4,fast=2.5")
	if err != nil {
		t.Fatal(err)
	}
	c := NewCluster(s, p)
	if c.String() != "cpu=16,fast=4" || c.Total() != 20 || c.Price("fast") != 2.5 || !c.Priced() {
		t.Errorf("cluster %v: total %d, fast price %v", c, c.Total(), c.Price("fast"))
	}
	if got := c.Cost(map[string]int{"cpu": 10, "fast": 2}); got < 8.999 || got > 9.001 {
		t.Errorf("cost %v, want 9", got)
	}
	if Uniform(20).String() != "20" {
		t.Errorf("Uniform(20) spelled %q", Uniform(20).String())
	}
	for _, bad := range []string{"0", "-3", "cpu", "cpu=x", "cpu=1,cpu=2", "c.p=1", "cpu=0", "cpu=-1"} {
		if _, err := ParseServers(bad); err == nil {
			t.Errorf("ParseServers(%q): no error", bad)
		}
	}
	for _, bad := range []string{"cpu", "cpu=-1", "cpu=NaN", "cpu=Inf", "cpu=1,cpu=1"} {
		if _, err := ParsePrices(bad); err == nil {
			t.Errorf("ParsePrices(%q): no error", bad)
		}
	}
}

// TestServersOfAll: the servers the plans of a cluster's pipelines were made for add up (each its share); a plan
// without an allocation (or none) counts none.
func TestServersOfAll(t *testing.T) {
	plans := []*Plan{{Allocation: &Allocation{ClusterServers: 12}}, nil, {}, {Allocation: &Allocation{ClusterServers: 8}}}
	if got := ServersOfAll(slices.Values(plans)); got != 20 {
		t.Errorf("ServersOfAll = %d, want 20", got)
	}
}
