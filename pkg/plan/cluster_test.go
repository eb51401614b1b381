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

// TestSpareOfAll: the servers the plans of a cluster's pipelines were made for (each its share) and do not use add
// up; a plan without an allocation (or none) counts none. A pipeline reaches its own replicas and those.
func TestSpareOfAll(t *testing.T) {
	busy := &Plan{Allocation: &Allocation{ClusterServers: 12}, Variants: []VariantPlan{{Replicas: 9}, {Replicas: 1}}}
	light := &Plan{Allocation: &Allocation{ClusterServers: 8}, Variants: []VariantPlan{{Replicas: 2}}}
	spare := SpareOfAll(slices.Values([]*Plan{busy, nil, {}, light}))
	if spare != 8 {
		t.Errorf("SpareOfAll = %d, want 2 + 6", spare)
	}
	if busy.Reach(spare) != 18 || light.Reach(spare) != 10 {
		t.Errorf("reach %d and %d, want 18 and 10 (not the 20 the plans were made for together)", busy.Reach(spare),
			light.Reach(spare))
	}
}
