package allocate

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// benchLimit bounds each MILP solve of the benchmarks, so that a demand the solver cannot prove in time reports the
// limit (and its gap, as the "gap" metric) instead of running for minutes.
const benchLimit = 2 * time.Second

// BenchmarkSolve solves the examples across a sweep of demands: hardware scaling at low demand, accuracy scaling
// past the switch point (on the traffic tree, 700 QPS is the slowest demand of the 50:1200:50 sweep). Metrics: "gap"
// (0 when proven optimal), "accuracy" of the plan, and the branch-and-bound "nodes" of every step solved.
func BenchmarkSolve(b *testing.B) {
	for _, c := range []struct {
		file    string
		servers int
		demands []float64
	}{
		{"../../examples/ocr-chain.yaml", 6, []float64{50, 150, 200, 250, 300, 400}},
		{"../../examples/traffic.yaml", 20, []float64{100, 300, 400, 450, 600, 700, 900}},
	} {
		spec, err := pipeline.Load(c.file)
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range c.demands {
			in := Input{Spec: spec, Demand: d, Servers: c.servers}
			b.Run(fmt.Sprintf("%s/qps=%v", spec.Name, d), func(b *testing.B) { benchSolve(b, in, Options{}) })
		}
	}
	chain := chainSpec(4, 6)
	for _, d := range []float64{20, 120, 200, 300} {
		in := Input{Spec: chain, Demand: d, Servers: 16}
		b.Run(fmt.Sprintf("%s/qps=%v", chain.Name, d), func(b *testing.B) { benchSolve(b, in, Options{}) })
	}
	// The chain's hard demands with a 1% optimality tolerance, 10,000 times the default: what is missing within the
	// time limit is the bound, not the last digits of the proof.
	for _, d := range []float64{200, 300} {
		in := Input{Spec: chain, Demand: d, Servers: 16}
		b.Run(fmt.Sprintf("%s/qps=%v,gap=0.01", chain.Name, d), func(b *testing.B) {
			benchSolve(b, in, Options{Gap: 0.01})
		})
	}
}

// BenchmarkSweep solves the traffic tree at every demand of the 50:1200:50 sweep README.md here reports, as the
// issue's target reads ("at every demand of a sweep"): per iteration, every demand once; with one branch-and-bound
// worker, and with one per CPU (the default) when there are more. Metrics: the slowest demand's solve ("max-ms"), the
// median over the accuracy-scaling demands ("median-ms"), and their nodes in all. Single demands are a weak guide:
// the node count of one moves by up to 2x with which optimal vertex an LP ends at. The ",gap=0.01" runs stop at a
// 1% optimality tolerance instead of the default 1e-6: how much of the time is the last of the proof.
func BenchmarkSweep(b *testing.B) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var runs []Options
	for _, gap := range []float64{0, 0.01} {
		runs = append(runs, Options{Workers: 1, Gap: gap})
		if n := runtime.GOMAXPROCS(0); n > 1 {
			runs = append(runs, Options{Workers: n, Gap: gap})
		}
	}
	for _, opt := range runs {
		name := fmt.Sprintf("workers=%d", opt.Workers)
		if opt.Gap > 0 {
			name += fmt.Sprintf(",gap=%v", opt.Gap)
		}
		opt.TimeLimit = benchLimit
		b.Run(name, func(b *testing.B) {
			var times []float64
			nodes := 0
			for i := 0; i < b.N; i++ {
				times, nodes = times[:0], 0
				for d := 50.0; d <= 1200; d += 50 {
					in := Input{Spec: spec, Demand: d, Servers: 20}
					res, err := Solve(in, opt)
					if err != nil {
						b.Fatal(err)
					}
					if res.Mode != ModeHardware {
						times = append(times, res.SolveMs)
						nodes += res.Nodes
					}
				}
			}
			slices.Sort(times)
			b.ReportMetric(times[len(times)-1], "max-ms")
			b.ReportMetric(times[len(times)/2], "median-ms")
			b.ReportMetric(float64(nodes), "nodes")
		})
	}
}

// BenchmarkProof splits the accuracy step's time at the traffic sweep's slowest demands into finding the optimum
// and proving it. "solve" is the accuracy step as Solve runs it (the heuristic, then the search); "proof" is the same
// branch-and-bound given the optimum as its first point (found beforehand, untimed) and no heuristic: what a perfect
// heuristic would leave. Both with one worker per CPU. Metric: "nodes".
func BenchmarkProof(b *testing.B) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range []float64{550, 650, 700, 850, 950, 1050} {
		in := Input{Spec: spec, Demand: d, Servers: 20}
		m, err := build(in, stepAccuracy)
		if err != nil {
			b.Fatal(err)
		}
		best, err := m.solve(Options{TimeLimit: benchLimit})
		if err != nil || best.Status != milp.Optimal {
			b.Fatalf("%v QPS: no optimum to start from (%s, %v)", d, best.Status, err)
		}
		for _, proof := range []bool{false, true} {
			name := fmt.Sprintf("traffic/qps=%v/solve", d)
			if proof {
				name = fmt.Sprintf("traffic/qps=%v/proof", d)
			}
			b.Run(name, func(b *testing.B) {
				var res milp.Result
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					m, err := build(in, stepAccuracy) // a fresh problem each time, as a solve has
					if err != nil {
						b.Fatal(err)
					}
					o := m.milpOptions(Options{TimeLimit: benchLimit})
					if proof {
						o.RootHeuristic, o.Incumbent = nil, best.X
					}
					b.StartTimer()
					if res, err = milp.Solve(m.prob, o); err != nil {
						b.Fatal(err)
					}
				}
				if res.Status != milp.Optimal || math.Abs(res.Objective-best.Objective) > 1e-6*best.Objective {
					b.Fatalf("%s at %v, where the first solve found %v", res.Status, res.Objective, best.Objective)
				}
				b.ReportMetric(float64(res.Nodes), "nodes")
			})
		}
	}
}

// BenchmarkAccuracySolves solves every demand past the switch point of the traffic tree at 14, 20 and 26 servers
// (25:1800:25, 171 accuracy-scaling or overloaded solves) and of the OCR chain at 4, 6 and 9 servers (10:900:10,
// 213), each once per iteration: the corpus behind the ratios for changes to the search in README.md here. Metrics
// per example: "<name>-ms" and "<name>-nodes" in all.
func BenchmarkAccuracySolves(b *testing.B) {
	for i := 0; i < b.N; i++ {
		for _, c := range []struct {
			file     string
			servers  []int
			to, step float64
		}{{"../../examples/traffic.yaml", []int{14, 20, 26}, 1800, 25},
			{"../../examples/ocr-chain.yaml", []int{4, 6, 9}, 900, 10}} {
			spec, err := pipeline.Load(c.file)
			if err != nil {
				b.Fatal(err)
			}
			ms, nodes := 0.0, 0
			for _, servers := range c.servers {
				for d := c.step; d <= c.to; d += c.step {
					res, err := Solve(Input{Spec: spec, Demand: d, Servers: servers}, Options{TimeLimit: benchLimit})
					if err != nil {
						b.Fatal(err)
					}
					if res.Mode != ModeHardware {
						ms += res.SolveMs
						nodes += res.Nodes
					}
				}
			}
			b.ReportMetric(ms, spec.Name+"-ms")
			b.ReportMetric(float64(nodes), spec.Name+"-nodes")
		}
	}
}

// benchSolve solves in b.N times with opt, under benchLimit.
func benchSolve(b *testing.B, in Input, opt Options) {
	opt.TimeLimit = benchLimit
	var res *Result
	for i := 0; i < b.N; i++ {
		var err error
		if res, err = Solve(in, opt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(res.Gap, "gap")
	b.ReportMetric(res.SystemAccuracy, "accuracy")
	b.ReportMetric(float64(res.Nodes), "nodes")
}

// chainSpec is a chain of tasks with variants per task, shaped like the examples: the k-th variant of a task is
// more accurate and slower than the (k-1)-th, latency a + c*batch, and each task but the last emits 1.5 items per
// item.
func chainSpec(tasks, variants int) *pipeline.Spec {
	spec := &pipeline.Spec{Name: fmt.Sprintf("chain%dx%d", tasks, variants), SLOMs: 800, CommLatencyMs: 1,
		BatchSizes: []int{1, 2, 4, 8, 16, 32, 64}}
	for t := 0; t < tasks; t++ {
		task := pipeline.Task{Name: fmt.Sprintf("t%d", t)}
		if t+1 < tasks {
			task.Children = []string{fmt.Sprintf("t%d", t+1)}
		}
		for v := 0; v < variants; v++ {
			a, c := 4+3*float64(v)+float64(t), 2+1.5*float64(v)
			variant := pipeline.Variant{Name: fmt.Sprintf("v%d", v),
				Accuracy: math.Round((0.7+0.05*float64(v)-0.01*float64(t))*1000) / 1000,
				Executor: pipeline.Executor{Kind: pipeline.ExecutorEmulated}}
			for _, bs := range spec.BatchSizes {
				l := a + c*float64(bs)
				variant.Profile = append(variant.Profile, pipeline.ProfilePoint{Batch: bs, P50Ms: l, P95Ms: 1.2 * l})
			}
			if len(task.Children) > 0 {
				variant.Fanout = &pipeline.Fanout{Mean: 1.5}
			}
			task.Variants = append(task.Variants, variant)
		}
		spec.Tasks = append(spec.Tasks, task)
	}
	// Through the parser, which validates the spec and completes it as it does a file.
	data, err := json.Marshal(spec)
	if err != nil {
		panic(err)
	}
	if spec, err = pipeline.ParseJSON(data); err != nil {
		panic(err)
	}
	return spec
}
