package sim

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

func trafficClasses(t testing.TB) *pipeline.Spec {
	t.Helper()
	spec, err := pipeline.Load("../../examples/traffic-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

var twoClasses = plan.NewCluster(map[string]int{"cpu": 40, "fast": 8}, plan.Prices{"cpu": 0.4, "fast": 2.5})

// TestClassesPlaceAndCost: on a cluster of two classes, every system places each replica on a server of its
// variant's class, and the summary's cost is the servers in use per class times their prices.
func TestClassesPlaceAndCost(t *testing.T) {
	for _, system := range []string{"loki", "cg-mean", "cg-peak"} {
		t.Run(system, func(t *testing.T) {
			w := workload.Constant(80, 20*time.Second)
			w.CV = 4
			s, err := newSim(Config{Spec: trafficClasses(t), Workload: w, Cluster: twoClasses, System: system,
				Seed: 3, CommLatency: -1})
			if err != nil {
				t.Fatal(err)
			}
			s.run()
			placed := 0
			for i := range s.servers {
				if a := s.servers[i].assigned; !a.Idle() {
					placed++
					if wire.ClassOf(a.Variant) != s.classOf[i] {
						t.Errorf("server %d of class %s hosts %s", i, s.classOf[i], a.Variant)
					}
				}
			}
			if placed == 0 {
				t.Fatal("no replica placed")
			}
			sum := s.result(s.pipes[0]).Summary
			want := 0.0
			for _, sc := range twoClasses {
				want += sum.MeanActiveByClass[sc.Name] * sc.PricePerHour
			}
			if sum.MeanCostPerHour <= 0 || math.Abs(sum.MeanCostPerHour-want) > 1e-9 {
				t.Errorf("cost %v per hour, want %v (servers by class %v)", sum.MeanCostPerHour, want,
					sum.MeanActiveByClass)
			}
			if got := sum.MeanActiveByClass["cpu"] + sum.MeanActiveByClass["fast"]; math.Abs(got-sum.MeanActiveServers) > 1e-9 {
				t.Errorf("servers by class %v, all %v", sum.MeanActiveByClass, sum.MeanActiveServers)
			}
			if sum.SLOViolationRatio > 0.5 {
				t.Errorf("%.1f%% violations: the cluster serves nothing", 100*sum.SLOViolationRatio)
			}
		})
	}
}

// TestClassesPeakCostsMore: cg-peak provisions a bursty workload's peak, cg-mean its mean, each once and for good: on
// the same run, cg-peak costs more and misses fewer deadlines.
func TestClassesPeakCostsMore(t *testing.T) {
	var sums []Summary
	for _, system := range []string{"cg-mean", "cg-peak"} {
		w := workload.Constant(120, 30*time.Second)
		w.CV = 4
		res, err := Run(Config{Spec: trafficClasses(t), Workload: w, Cluster: twoClasses, System: system, Seed: 1,
			Warmup:      2 * time.Second, // the first second runs the spec's allocation section, before the first plan
			CommLatency: -1})
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, res.Summary)
		// planned once, and no tuner lends them a worker: the servers in use never change
		if s := res.Summary; float64(s.MaxActiveServers) != s.MeanActiveServers {
			t.Errorf("%s: %v servers on average, %d at most: its servers changed", system, s.MeanActiveServers,
				s.MaxActiveServers)
		}
	}
	mean, peak := sums[0], sums[1]
	if peak.MeanCostPerHour <= mean.MeanCostPerHour || peak.SLOViolationRatio > mean.SLOViolationRatio {
		t.Errorf("cg-peak %.2f/h %.2f%% misses, cg-mean %.2f/h %.2f%%", peak.MeanCostPerHour,
			100*peak.SLOViolationRatio, mean.MeanCostPerHour, 100*mean.SLOViolationRatio)
	}
	if peak.Replans != 1 || mean.Replans != 1 { // the first plan, from the spec's allocation section, is not theirs
		t.Errorf("the coarse-grained baselines planned %d and %d times, want once", mean.Replans, peak.Replans)
	}
}

// TestClassesDeterministic: on a cluster of classes, two runs with the same seed are the same run, time series and
// cost included, for Sleipnir's planner and for a baseline that plans on a planning trace.
func TestClassesDeterministic(t *testing.T) {
	for _, system := range []string{"loki", "cg-peak"} {
		w := workload.Constant(300, 10*time.Second)
		w.CV = 4
		cfg := Config{Spec: trafficClasses(t), Workload: w, Cluster: twoClasses, System: system, Seed: 7,
			CommLatency: -1}
		a, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		a.Summary.WallSeconds, b.Summary.WallSeconds, a.Summary.PlanSeconds, b.Summary.PlanSeconds = 0, 0, 0, 0
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: two runs with the same seed differ:\n%+v\n%+v", system, a.Summary, b.Summary)
		}
	}
}

// TestCostCapHolds: with a cost cap under what the cheapest full-accuracy plan costs (traffic-classes at 600 QPS
// on cpu=16,fast=4: 10.70 an hour), every plan and the tuner's loans keep the servers in use within the cap, the
// plans trade accuracy for it, and the deadlines hold; uncapped, the same run costs more.
func TestCostCapHolds(t *testing.T) {
	cluster := plan.NewCluster(map[string]int{"cpu": 16, "fast": 4}, plan.Prices{"cpu": 0.4, "fast": 2.5})
	const maxCost = 8.0
	var sums []Summary
	for _, c := range []float64{0, maxCost} {
		s, err := newSim(Config{Spec: trafficClasses(t), Workload: workload.Constant(600, 20*time.Second),
			Cluster: cluster, Seed: 1, CommLatency: -1, Warmup: 5 * time.Second,
			Control: control.Config{MaxCostPerHour: c}})
		if err != nil {
			t.Fatal(err)
		}
		s.run()
		sums = append(sums, s.result(s.pipes[0]).Summary)
	}
	free, capped := sums[0], sums[1]
	t.Logf("uncapped: %.2f an hour, accuracy %.4f, %.2f%% violations; capped at %v: %.2f an hour (at most %.2f), "+
		"accuracy %.4f, %.2f%% violations", free.MeanCostPerHour, free.MeanAccuracy, 100*free.SLOViolationRatio,
		maxCost, capped.MeanCostPerHour, capped.MaxCostPerHour, capped.MeanAccuracy, 100*capped.SLOViolationRatio)
	if free.MeanCostPerHour <= maxCost {
		t.Fatalf("uncapped, the run costs %.2f an hour: the cap of %v does not bind", free.MeanCostPerHour, maxCost)
	}
	if capped.MaxCostPerHour > maxCost+1e-9 || capped.MeanAccuracy >= free.MeanAccuracy {
		t.Errorf("capped at %v: at most %.2f an hour, accuracy %.4f (uncapped %.4f)", maxCost,
			capped.MaxCostPerHour, capped.MeanAccuracy, free.MeanAccuracy)
	}
	if capped.SLOViolationRatio > 0.01 {
		t.Errorf("capped: %.2f%% violations", 100*capped.SLOViolationRatio)
	}
}
