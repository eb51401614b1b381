package core

import (
	"slices"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func load(t testing.TB, file string) *pipeline.Spec {
	t.Helper()
	spec, err := pipeline.Load("../../examples/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// reportAll reports each pipeline's requests of the last second (by name) and ticks, as the planner does.
func reportAll(t *testing.T, c *Cluster, now time.Time, able int, qps map[string]int) []Decision {
	t.Helper()
	for name, n := range qps {
		if _, err := c.Report(name, wire.DemandReport{Frontend: "f", Count: n, IntervalMs: 1000}, now); err != nil {
			t.Fatal(err)
		}
	}
	ds := tickAndPublish(c, now, able)
	if err := c.DivisionErr(); err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestMinimalHosting: a pipeline without demand keeps a minimal hosting where the cluster has room (ocr beside
// traffic at 300 QPS on 20 workers; both idle on 6), and where it has none (traffic beside ocr on 4 workers: 2 + 3
// tasks) it gets no server and a plan that hosts nothing, which frontends and workers accept; the requests its
// frontends then refuse, reported as demand, give it servers at the next division.
func TestMinimalHosting(t *testing.T) {
	ocr := load(t, "ocr.yaml")
	for _, c := range []struct {
		workers int
		qps     map[string]int
	}{{20, map[string]int{"traffic": 300, "ocr": 0}}, {6, map[string]int{"traffic": 0, "ocr": 0}}} {
		now := time.Unix(1000, 0)
		cl := started(t, now, ocr, traffic(t))
		var ds []Decision
		for range 3 {
			now = now.Add(TickEvery)
			ds = reportAll(t, cl, now, c.workers, c.qps)
		}
		for i, p := range cl.Pipelines() {
			cur := p.Current()
			if cur.HostsNothing() || cur.Servers() > ds[i].Observed.Servers {
				t.Errorf("%d workers, %v: %s's plan has %d servers of its share of %d, want a hosting", c.workers,
					c.qps, p.Spec.Name, cur.Servers(), ds[i].Observed.Servers)
			}
			for _, task := range p.Spec.Tasks {
				if len(cur.Hosted(p.Spec, task.Name)) == 0 {
					t.Errorf("%d workers, %v: %s's plan hosts no variant of %s", c.workers, c.qps, p.Spec.Name, task.Name)
				}
			}
		}
	}

	// No room: 4 workers for ocr's 2 tasks and traffic's 3.
	now := time.Unix(1000, 0)
	cl := started(t, now, ocr, traffic(t))
	idle := map[string]int{"traffic": 0, "ocr": 0}
	var ds []Decision
	for range 3 {
		now = now.Add(TickEvery)
		ds = reportAll(t, cl, now, 4, idle)
	}
	shed := cl.Pipeline("traffic")
	if shed.Current().Servers() != 0 || ds[1].Observed.Servers != 0 {
		t.Fatalf("4 workers, nothing sent: traffic has %d servers of a share of %d; want ocr hosted, traffic none "+
			"(the joint plan's choice at the minimal demand)", shed.Current().Servers(), ds[1].Observed.Servers)
	}
	if err := shed.Current().Validate(shed.Spec); err != nil || !shed.Current().HostsNothing() {
		t.Fatalf("traffic's plan without a server: %v, want a valid plan that hosts nothing", err)
	}
	// Its first requests are refused and reported: the next division gives it the servers (ocr has no demand).
	now = now.Add(TickEvery)
	asked := map[string]int{"traffic": 5, "ocr": 0}
	reportAll(t, cl, now, 4, asked)
	for range 3 {
		now = now.Add(TickEvery)
		ds = reportAll(t, cl, now, 4, asked)
		if !shed.Current().HostsNothing() {
			break
		}
	}
	if cur := shed.Current(); cur.HostsNothing() || cur.Validate(shed.Spec) != nil {
		t.Fatalf("traffic asked 5 QPS for 4 s on 4 idle workers and still has %d servers", cur.Servers())
	}
}

// TestShedGetsNoCrumbs: the servers no plan uses go to the pipelines that are hosted, not to one the joint plan shed:
// a share too small to host it (traffic's 3 tasks on 1 or 2 servers) left its loop unable to plan, and its plan in
// force, the one before, routed its requests to workers that served it no more.
func TestShedGetsNoCrumbs(t *testing.T) {
	chain := load(t, "ocr-chain.yaml")
	now := time.Unix(1000, 0)
	cl := started(t, now, traffic(t), chain) // traffic first: it would have the first of the servers left
	var ds []Decision
	for range 3 {
		now = now.Add(TickEvery)
		ds = reportAll(t, cl, now, 4, map[string]int{"traffic": 0, chain.Name: 2})
	}
	tr := cl.Pipeline("traffic")
	if n := ds[0].Observed.Servers; n != 0 && n < len(tr.Spec.Tasks) {
		t.Fatalf("traffic's share is %d servers, fewer than its %d tasks", n, len(tr.Spec.Tasks))
	}
	if cur := tr.Current(); cur.Validate(tr.Spec) != nil || !cur.HostsNothing() && cur.Servers() > ds[0].Observed.Servers {
		t.Fatalf("traffic's plan in force has %d servers of a share of %d", cur.Servers(), ds[0].Observed.Servers)
	}
	if got := ds[0].Observed.Servers + ds[1].Observed.Servers; got != 4 {
		t.Errorf("the shares add up to %d of 4 workers", got)
	}
}

// TestHostShed: the pipelines a joint plan left without a server are planned again on the servers no plan uses, and
// hosted where those suffice.
func TestHostShed(t *testing.T) {
	ocr := load(t, "ocr.yaml")
	now := time.Unix(1000, 0)
	cl := started(t, now, ocr, traffic(t))
	ds := []Decision{{Pipeline: cl.pipes[0]}, {Pipeline: cl.pipes[1]}}
	plans, err := cl.solveJoint(ds[:1], plan.Uniform(6), false)
	if err != nil {
		t.Fatal(err)
	}
	plans = append(plans, nil) // as if the joint plan had shed traffic
	left := map[string]int{wire.DefaultClass: 6 - plans[0].Servers()}
	got := cl.hostShed(ds, plans, plan.Uniform(6), left)
	if got[1] == nil || got[1].Servers() > left[wire.DefaultClass] || got[0] != nil {
		t.Fatalf("hostShed on %d servers left: %v, want traffic hosted on them", left[wire.DefaultClass], got)
	}
	left[wire.DefaultClass] = 2 // fewer than traffic's 3 tasks
	if got := cl.hostShed(ds, plans, plan.Uniform(6), left); len(got) != 0 {
		t.Fatalf("hostShed on 2 servers left hosts %v", got)
	}
}

// TestFairFloor: a pipeline at its normal demand keeps the servers it needs while another is far over the cluster
// (traffic at 1,600 QPS on 20 workers, twice what they serve, beside ocr-chain at 20 QPS): the joint allocation
// alone gives traffic every server and ocr-chain none. The floor comes from traffic's share, and ocr-chain's plan
// serves its demand.
func TestFairFloor(t *testing.T) {
	chain := load(t, "ocr-chain.yaml")
	now := time.Unix(1000, 0)
	cl := started(t, now, traffic(t), chain)
	var ds []Decision
	for range 4 {
		now = now.Add(TickEvery)
		ds = reportAll(t, cl, now, 20, map[string]int{"traffic": 1600, chain.Name: 20})
	}
	ocr := cl.Pipeline(chain.Name).Current()
	if ocr.HostsNothing() || ocr.Allocation == nil || ocr.Allocation.ServedQPS < 20 {
		t.Fatalf("ocr-chain at 20 QPS beside traffic at 1,600: a share of %d servers, a plan of %d serving %v; want "+
			"its demand served", ds[1].Observed.Servers, ocr.Servers(), ocr.Allocation)
	}
	if got := ds[0].Observed.Servers + ds[1].Observed.Servers; got != 20 || ds[1].Observed.Servers > 10 {
		t.Errorf("shares traffic %d, ocr-chain %d; want all 20 given, ocr-chain at most its even share",
			ds[0].Observed.Servers, ds[1].Observed.Servers)
	}
	t.Logf("traffic %d servers, ocr-chain %d (its plan %d, serving %.1f QPS)", ds[0].Observed.Servers,
		ds[1].Observed.Servers, ocr.Servers(), ocr.Allocation.ServedQPS)
}

// TestDivisionSolvedIsReported: the tick that divides the workers by the joint allocation says how long its solves
// took; the ticks that keep the division in force (the demand steady) report none.
func TestDivisionSolvedIsReported(t *testing.T) {
	now := time.Unix(1000, 0)
	cl := started(t, now, load(t, "ocr.yaml"), traffic(t))
	qps := map[string]int{"traffic": 300, "ocr": 20}
	var divided []bool
	for range 4 {
		now = now.Add(TickEvery)
		reportAll(t, cl, now, 20, qps)
		ms, ok := cl.DivisionSolved()
		if ok && ms <= 0 {
			t.Fatalf("a division solved in %v ms", ms)
		}
		divided = append(divided, ok)
	}
	if !slices.Contains(divided, true) || divided[len(divided)-1] {
		t.Fatalf("divided at the ticks %v: want a division, then the steady demand's ticks keeping it", divided)
	}
}
