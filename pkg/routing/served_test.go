package routing

import (
	"math"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// TestServed: what a plan carries is bounded by its root's capacity or by the first variant the routing overfills
// below it, under the factors given (treeYAML: x sends 2.4 sub-requests an item to b and 0.6 to c, y 0.8 and 0.2).
func TestServed(t *testing.T) {
	spec, err := pipeline.Parse([]byte(treeYAML))
	if err != nil {
		t.Fatal(err)
	}
	measured := map[string]pipeline.Fanout{"a/x": {Mean: 1.5, Shares: map[string]float64{"b": 0.8, "c": 0.2}}}
	for _, c := range []struct {
		name    string
		hosting []string
		fanout  map[string]pipeline.Fanout
		want    float64
	}{
		{"the root bounds it", []string{"a/x=100", "b/p=1000", "c/s=1000"}, nil, 100},
		{"a child bounds it", []string{"a/x=100", "b/p=120", "c/s=1000"}, nil, 50},
		{"the less accurate root variant takes the rest", []string{"a/x=40", "a/y=100", "b/p=100", "c/s=100"}, nil, 45},
		{"a factor measured since lifts the child's bound", []string{"a/x=100", "b/p=120", "c/s=1000"}, measured, 100},
		{"nothing at the root", []string{"b/p=120", "c/s=1000"}, nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Served(Input{Spec: spec, Plan: hosting(c.hosting...), Fanout: c.fanout, Demand: 7, Utilization: 0.5})
			if math.Abs(got-c.want) > 1e-3 {
				t.Errorf("served %v, want %v", got, c.want)
			}
		})
	}
}
