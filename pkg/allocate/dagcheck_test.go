package allocate

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// dagInstance is a small random allocation problem over parallel branches: a root a whose every item goes to b and
// to c (parallel), either two leaves (c with a fan-out of its own) or, with join, joined again by d (a DAG: d on two
// chains); 2-3 variants per task (2 with the join) with linear batch latency profiles, random SLO, demand and
// cluster size.
// TestCrossCheckWithCBC solves both beside its trees: with the join, the chains through d must agree on the root's
// and d's variants (addJoinAgreement) and each must fit d's batch size (addJoinCapacity), or CBC's complete model
// finds our plans carrying traffic on an unhosted variant of d or at a batch size over a chain's budget.
func dagInstance(seed uint64, join bool) Input {
	r := rand.New(rand.NewPCG(seed, 0xda9))
	batches := [][]int{{1, 2, 4}, {1, 2, 4, 8}}[r.IntN(2)]
	spec := &pipeline.Spec{Name: fmt.Sprintf("dag%d", seed), BatchSizes: batches, CommLatencyMs: float64(r.IntN(3))}
	tasks := []pipeline.Task{{Name: "a", Children: []string{"b", "c"}, Parallel: []string{"b", "c"}}, {Name: "b"},
		{Name: "c"}}
	if join {
		tasks[1].Children, tasks[2].Children = []string{"d"}, []string{"d"}
		tasks = append(tasks, pipeline.Task{Name: "d", Join: &pipeline.Join{Mode: pipeline.JoinAll}})
	}
	for ti := range tasks {
		t := &tasks[ti]
		nv := 2 + r.IntN(2)
		if join {
			nv = 2 // with three per task, CBC took up to a minute on a joined instance's complete model
		}
		for vi := range nv {
			v := linearVariant(r, vi, batches)
			switch {
			case join && (t.Name == "b" || t.Name == "c"):
				v.Fanout = &pipeline.Fanout{Mean: 1, Distribution: pipeline.FanoutFixed}
			case !join && t.Name == "a":
				v.Branches = map[string]pipeline.Fanout{"c": {Mean: math.Round((0.5+2.5*r.Float64())*100) / 100,
					Distribution: pipeline.FanoutPoisson}}
			}
			t.Variants = append(t.Variants, v)
		}
	}
	spec.Tasks = tasks
	spec.SLOMs = float64(2 * (60 + r.IntN(200)))
	return Input{Spec: spec, Demand: float64(5 + r.IntN(150)), Servers: 3 + r.IntN(7)}
}

// linearVariant is a random variant named v<vi> with a linear batch latency profile over batches.
func linearVariant(r *rand.Rand, vi int, batches []int) pipeline.Variant {
	v := pipeline.Variant{Name: fmt.Sprintf("v%d", vi), Accuracy: 0.5 + 0.45*r.Float64(),
		Executor: pipeline.Executor{Kind: pipeline.ExecutorEmulated}}
	a, c := 5+35*r.Float64(), 2+18*r.Float64()
	for _, b := range batches {
		l := math.Round((a+c*float64(b))*10) / 10
		v.Profile = append(v.Profile, pipeline.ProfilePoint{Batch: b, P50Ms: l, P95Ms: 1.2 * l})
	}
	return v
}
