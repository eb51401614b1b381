package allocate

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// classedInstance is randomInstance on 2-3 server classes: each variant is deployed on each class with a chance of
// 3/4 (a class without its profile cannot host it), at the class's speed (a factor of 0.25-1.5 on every latency,
// jittered per variant), each class with 1-6 servers and a price (an integral one on some instances, so that both
// hardware objectives are met); on a third of them a cost cap between the cheapest and the dearest server's.
func classedInstance(seed uint64) Input {
	in := randomInstance(seed)
	r := rand.New(rand.NewPCG(seed, 0xc1a55))
	classes := []string{wire.DefaultClass, "fast", "slow"}[:2+r.IntN(2)]
	speed := map[string]float64{wire.DefaultClass: 1}
	servers := map[string]int{}
	prices := plan.Prices{}
	integral := r.IntN(2) == 0
	for _, c := range classes {
		if c != wire.DefaultClass {
			speed[c] = 0.25 + 1.25*r.Float64()
		}
		servers[c] = 1 + r.IntN(6)
		prices[c] = math.Round((0.2+3*r.Float64())*10) / 10
		if integral {
			prices[c] = math.Ceil(prices[c])
		}
	}
	spec := *in.Spec
	spec.Tasks = nil
	for _, t := range in.Spec.Tasks {
		nt := t
		nt.Variants = nil
		for _, v := range t.Variants {
			for _, c := range classes {
				if r.IntN(4) == 0 {
					continue
				}
				d := v
				d.Name = wire.VariantOn(v.Name, c)
				f := speed[c] * (0.9 + 0.2*r.Float64())
				d.Profile = nil
				for _, p := range v.Profile {
					p.P50Ms, p.P95Ms = math.Round(p.P50Ms*f*10)/10, math.Round(p.P95Ms*f*10)/10
					d.Profile = append(d.Profile, p)
				}
				nt.Variants = append(nt.Variants, d)
			}
		}
		if len(nt.Variants) == 0 { // every task keeps a deployment
			nt.Variants = append(nt.Variants, t.Variants[0])
		}
		spec.Tasks = append(spec.Tasks, nt)
	}
	spec.Name = fmt.Sprintf("classed%d", seed)
	in.Spec, in.Servers = &spec, 0
	in.Cluster = plan.NewCluster(servers, prices)
	if seed%3 == 0 {
		in.MaxCostPerHour = math.Round(in.Cluster.Cost(servers)*(0.3+0.5*r.Float64())*10) / 10
	}
	return in
}

// TestCrossCheckClassesWithCBC: the three steps of random instances on server classes (classedInstance), under both
// latency models, solved by the branch-and-bound and, on the paper's formulation (export.go, a servers row per class,
// the cost objective and cap; for the max-demand step our formulation), by CBC: the same status and optimum, and our
// solution satisfies the paper's model.
func TestCrossCheckClassesWithCBC(t *testing.T) {
	skipWithoutCBC(t)
	n := 20
	if testing.Short() {
		n = 10
	}
	compared, optima, split := 0, 0, 0
	for seed := uint64(0); seed < uint64(n); seed++ {
		for _, lm := range []LatencyModel{LatencyBurst, LatencyLoki} {
			in := classedInstance(seed)
			in.LatencyModel = lm
			for _, st := range []step{stepHardware, stepAccuracy, stepMaxDemand} {
				m, err := build(in, st)
				if err != nil {
					continue // no path fits the SLO
				}
				name := fmt.Sprintf("instance %d (%s, %v QPS, %s, cap %v, %s model) step %d", seed, in.Spec.Name,
					in.Demand, in.Cluster, in.MaxCostPerHour, lm, st)
				ours, err := m.solve(Options{TimeLimit: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				// CBC takes minutes on some max-demand steps' complete (big-M) models: there it solves our model,
				// which our solution must still satisfy in the complete form.
				complete, point := m.complete()
				toCBC := complete
				if st == stepMaxDemand {
					toCBC = m.prob
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				cst, cobj, err := milp.SolveCBC(ctx, toCBC)
				cancel()
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if ours.Status == milp.Limit {
					t.Errorf("%s: stopped at the time limit", name)
					continue
				}
				compared++
				if ours.Status != cst {
					t.Errorf("%s: we say %s (%v), CBC says %s (%v)", name, ours.Status, ours.Objective, cst, cobj)
					continue
				}
				if cst != milp.Optimal {
					continue
				}
				optima++
				if d := math.Abs(ours.Objective - cobj); d > 1e-5*max(1, math.Abs(cobj)) {
					t.Errorf("%s: objective %.9g, CBC %.9g", name, ours.Objective, cobj)
				}
				if v := complete.Violation(point(ours.X)); v > 1e-6 {
					logViolations(t, complete, point(ours.X))
					t.Errorf("%s: our solution violates the complete model by %g", name, v)
				}
				classes := 0
				for _, n := range m.usedByClass(ours.X) {
					classes += min(n, 1)
				}
				if classes > 1 && st == stepHardware {
					split++
				}
			}
		}
	}
	t.Logf("%d classed models compared with CBC, %d optima; %d hardware optima on several classes", compared, optima,
		split)
}

// TestClassedSolve: Solve on classes reports the servers used per class and their cost, each hosted variant on a
// class of the cluster within its servers, the cost within a cap, and the plan carries the cluster and cost.
func TestClassedSolve(t *testing.T) {
	for seed := uint64(0); seed < 30; seed++ {
		in := classedInstance(seed)
		r, err := Solve(in, Options{TimeLimit: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		used := map[string]int{}
		for _, h := range r.Variants {
			used[wire.ClassOf(h.Variant)] += h.Replicas
		}
		for class, n := range used {
			if n > in.Cluster.Servers(class) || n != r.UsedByClass[class] {
				t.Errorf("seed %d: %d servers of class %s used (reported %d) of %d", seed, n, class,
					r.UsedByClass[class], in.Cluster.Servers(class))
			}
		}
		if cost := in.Cluster.Cost(used); math.Abs(cost-r.CostPerHour) > 1e-9 ||
			in.MaxCostPerHour > 0 && cost > in.MaxCostPerHour+1e-6 {
			t.Errorf("seed %d: cost %v reported %v, cap %v", seed, cost, r.CostPerHour, in.MaxCostPerHour)
		}
		p := r.Plan(in.Spec.Name, 1)
		if p.Allocation.CostPerHour != r.CostPerHour || len(p.Allocation.Cluster) != len(in.Cluster) {
			t.Errorf("seed %d: the plan's cluster %v and cost %v", seed, p.Allocation.Cluster, p.Allocation.CostPerHour)
		}
		for _, v := range p.Variants {
			if v.Class != wire.ClassOf(v.Variant) {
				t.Errorf("seed %d: variant %s on class %q", seed, v.Variant, v.Class)
			}
		}
	}
}

// TestUniformClusterIsServers: a cluster of one default class, unpriced, is Servers: the same plan, and the result
// reports no cluster.
func TestUniformClusterIsServers(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []float64{200, 450} {
		a, err := Solve(Input{Spec: spec, Demand: d, Servers: 20}, Options{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Solve(Input{Spec: spec, Demand: d, Cluster: plan.Uniform(20)}, Options{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		if a.Mode != b.Mode || a.ServersUsed != b.ServersUsed || a.SystemAccuracy != b.SystemAccuracy ||
			a.Cluster != nil || b.Cluster != nil || a.CostPerHour != 0 {
			t.Errorf("%v QPS: Servers gives %+v, Cluster %+v", d, a, b)
		}
	}
}

// TestClassesExampleWithCBC: the classed traffic example (examples/traffic-classes.yaml on cpu=16,fast=4 at 0.4 and
// 2.5 an hour, docs/classes.md) at demands of its sweep in hardware mode: our cheapest plan costs what CBC finds on
// the paper's formulation of the same step, and satisfies it.
func TestClassesExampleWithCBC(t *testing.T) {
	skipWithoutCBC(t)
	spec, err := pipeline.Load("../../examples/traffic-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cluster := plan.NewCluster(map[string]int{"cpu": 16, "fast": 4}, plan.Prices{"cpu": 0.4, "fast": 2.5})
	for _, d := range []float64{200, 600} {
		in := Input{Spec: spec, Demand: d, Cluster: cluster, Utilization: 1}
		m, err := build(in, stepHardware)
		if err != nil {
			t.Fatal(err)
		}
		ours, err := m.solve(Options{TimeLimit: 20 * time.Second})
		if err != nil || ours.Status != milp.Optimal {
			t.Fatalf("%v QPS: %v %v", d, ours.Status, err)
		}
		complete, point := m.complete()
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		cst, cobj, err := milp.SolveCBC(ctx, complete)
		cancel()
		if err != nil || cst != milp.Optimal {
			t.Fatalf("%v QPS: CBC %s %v", d, cst, err)
		}
		if math.Abs(ours.Objective-cobj) > 1e-6*max(1, cobj) {
			t.Errorf("%v QPS: our cheapest costs %v, CBC's %v (in tenths: prices scaled by %v)", d, ours.Objective,
				cobj, priceScale(cluster))
		}
		if v := complete.Violation(point(ours.X)); v > 1e-6 {
			t.Errorf("%v QPS: our plan violates the paper's formulation by %g", d, v)
		}
		t.Logf("%v QPS: cost %v an hour, as CBC's (%v servers by class)", d, ours.Objective/priceScale(cluster),
			m.usedByClass(ours.X))
	}
}

// TestJointOnClasses: one pipeline on a Cluster gets Solve's plan from SolveJoint (the same mode, cost and accuracy);
// two pipelines share each class's servers, and when each one's cheapest plan wants the same fast servers, the
// hardware step solves them together and both stay at their most accurate within the classes.
func TestJointOnClasses(t *testing.T) {
	camera := classedSweeps(t)[1].in
	for _, d := range []float64{60, 180} {
		in := camera
		in.Demand = d
		want, err := Solve(in, Options{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		joint, err := SolveJoint(JointInput{Pipelines: []Input{in}, Cluster: in.Cluster}, Options{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		got := joint.Pipelines[0]
		if got.Mode != want.Mode || math.Abs(got.CostPerHour-want.CostPerHour) > 1e-9 ||
			math.Abs(got.SystemAccuracy-want.SystemAccuracy) > 1e-6 || joint.CostPerHour != got.CostPerHour {
			t.Errorf("%v QPS: joint %s at %.6f costing %v (%v in all); Solve %s at %.6f costing %v", d, got.Mode,
				got.SystemAccuracy, got.CostPerHour, joint.CostPerHour, want.Mode, want.SystemAccuracy, want.CostPerHour)
		}
	}
	// Two copies of the camera, each of whose cheapest plan alone takes most fast servers: together they do not fit
	// those plans, and the hardware step solved together finds both a plan at their most accurate.
	other := *camera.Spec
	other.Name = "camera2"
	cluster := plan.NewCluster(map[string]int{"default": 16, "fast": 4}, plan.Prices{"default": 1, "fast": 2.5})
	for _, d := range []float64{40, 60} {
		a, b := camera, camera
		a.Demand, b.Demand, b.Spec = d, d, &other
		alone, err := Solve(Input{Spec: a.Spec, Demand: d, Cluster: cluster}, Options{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		joint, err := SolveJoint(JointInput{Pipelines: []Input{a, b}, Cluster: cluster}, Options{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		for class, n := range joint.UsedByClass {
			if n > cluster.Servers(class) {
				t.Errorf("%v QPS: %d servers of class %s used, of %d", d, n, class, cluster.Servers(class))
			}
		}
		t.Logf("%v QPS: alone %s, %v, cost %v; together %v, cost %v, modes %s and %s", d, alone.Mode,
			alone.UsedByClass, alone.CostPerHour, joint.UsedByClass, joint.CostPerHour, joint.Pipelines[0].Mode,
			joint.Pipelines[1].Mode)
		if joint.Pipelines[0].Mode == ModeHardware && joint.CostPerHour < 2*alone.CostPerHour-1e-9 {
			t.Errorf("%v QPS: together %v an hour, below twice the cheapest alone (%v)", d, joint.CostPerHour,
				alone.CostPerHour)
		}
	}
}

// TestCostCapOneClass: on one priced class (the enumeration's case) a cap below the cheapest hardware plan's cost
// gives accuracy mode within the cap, and a cap above it the hardware plan.
func TestCostCapOneClass(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cluster := plan.NewCluster(map[string]int{wire.DefaultClass: 20}, plan.Prices{wire.DefaultClass: 0.5})
	free, err := Solve(Input{Spec: spec, Demand: 300, Cluster: cluster}, Options{Workers: 1})
	if err != nil || free.Mode != ModeHardware {
		t.Fatalf("%v %+v", err, free)
	}
	for _, cap := range []float64{free.CostPerHour, free.CostPerHour - 1} {
		r, err := Solve(Input{Spec: spec, Demand: 300, Cluster: cluster, MaxCostPerHour: cap}, Options{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		wantMode := ModeHardware
		if cap < free.CostPerHour {
			wantMode = ModeAccuracy
		}
		if r.Mode != wantMode || r.CostPerHour > cap+1e-9 {
			t.Errorf("cap %v: %s at %v an hour, want %s within the cap (uncapped: %v)", cap, r.Mode, r.CostPerHour,
				wantMode, free.CostPerHour)
		}
	}
}

// The fixed-batch heuristic's restricted search wants only a point better than the search's incumbent: on the
// classed traffic example at 1400 QPS (accuracy mode, a full cluster), given its own point's value it finds nothing
// (without the cutoff it found and proved that point again).
func TestRestrictedSearchCutoff(t *testing.T) {
	c := classedSweeps(t)[0]
	in := c.in
	in.Demand = 1400
	m, err := build(in, stepAccuracy)
	if err != nil {
		t.Fatal(err)
	}
	var first, again []float64
	o := m.milpOptions(Options{Workers: 1})
	o.MaxNodes = 1
	o.RootHeuristic = func(x []float64, best float64) []float64 {
		m.tried = nil // the same batches twice
		if first = m.fixedBatchIncumbent(x, best, Options{Workers: 1}); first != nil {
			again = m.fixedBatchIncumbent(x, m.prob.Value(first), Options{Workers: 1})
		}
		return first
	}
	if _, err := milp.Solve(m.prob, o); err != nil {
		t.Fatal(err)
	}
	if first == nil {
		t.Fatal("the heuristic found no point at the root")
	}
	if again != nil {
		t.Errorf("given its own point's value %v, the heuristic returned a point worth %v", m.prob.Value(first),
			m.prob.Value(again))
	}
}
