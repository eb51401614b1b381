package pipeline

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

const base = `
name: t
slo_ms: 500
batch_sizes: [1, 4]
tasks:
  - name: det
    children: [cls, face]
    variants:
      - name: big
        accuracy: 0.9
        executor: {kind: emulated}
        fanout: {mean: 3, shares: {cls: 0.7, face: 0.3}}
        profile:
          - {batch: 1, p50_ms: 20, p95_ms: 30}
          - {batch: 4, p50_ms: 50, p95_ms: 60}
      - name: small
        accuracy: 0.7
        executor: {kind: emulated}
        fanout: {mean: 2, shares: {cls: 0.5, face: 0.5}}
        profile:
          - {batch: 1, p50_ms: 10, p95_ms: 12}
          - {batch: 4, p50_ms: 20, p95_ms: 24}
  - name: cls
    variants:
      - name: c1
        accuracy: 0.8
        executor: {kind: emulated}
        profile:
          - {batch: 1, p50_ms: 5, p95_ms: 6}
          - {batch: 4, p50_ms: 10, p95_ms: 12}
  - name: face
    variants:
      - name: f1
        accuracy: 0.5
        executor: {kind: emulated}
        profile:
          - {batch: 1, p50_ms: 5, p95_ms: 6}
          - {batch: 4, p50_ms: 10, p95_ms: 12}
path_accuracy:
  - {path: [det/big, cls/c1], accuracy: 0.75}
`

func TestParseValid(t *testing.T) {
	s, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if s.Root().Name != "det" || !s.IsLeaf("cls") || s.IsLeaf("det") || s.Parent("face") != "det" || s.Parent("det") != "" {
		t.Fatal("tree helpers disagree with the spec")
	}
	if got := fmt.Sprint(s.Chains()); got != "[[det cls] [det face]]" {
		t.Errorf("chains %s", got)
	}
	if got := fmt.Sprint(s.Paths()); got != "[[det/big cls/c1] [det/small cls/c1] [det/big face/f1] [det/small face/f1]]" {
		t.Errorf("paths %s", got)
	}
	if a := s.PathAccuracyOf([]string{"det/big", "cls/c1"}); a != 0.75 {
		t.Errorf("override accuracy %v, want 0.75", a)
	}
	if a := s.PathAccuracyOf([]string{"det/small", "face/f1"}); math.Abs(a-0.35) > 1e-12 {
		t.Errorf("product accuracy %v, want 0.35", a)
	}
	if s.Task("det").MostAccurate().Name != "big" {
		t.Error("most accurate")
	}
	v := s.Variant("det", "big")
	for _, tc := range []struct{ n, batch int }{{1, 1}, {2, 4}, {4, 4}, {9, 4}} {
		if got := v.LatencyFor(tc.n).Batch; got != tc.batch {
			t.Errorf("LatencyFor(%d) is batch %d, want %d", tc.n, got, tc.batch)
		}
	}
	if q := v.Throughput(4); math.Abs(q-80) > 1e-9 {
		t.Errorf("throughput at batch 4: %v, want 80", q)
	}
	if _, ok := v.Point(2); ok {
		t.Error("Point(2) found a batch that is not profiled")
	}
	// Defaults: distribution.
	if v.Fanout.Distribution != FanoutPoisson {
		t.Errorf("default distribution %q", v.Fanout.Distribution)
	}
	// JSON round trip, as the planner stores it in KV.
	data, _ := json.Marshal(s)
	s2, err := ParseJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	data2, _ := json.Marshal(s2)
	if string(data) != string(data2) {
		t.Errorf("JSON round trip changed the spec:\n%s\n%s", data, data2)
	}
}

func TestDefaults(t *testing.T) {
	s, err := Parse([]byte(`
name: d
slo_ms: 100
tasks:
  - name: a
    children: [b]
    variants:
      - {name: x, accuracy: 1, executor: {kind: emulated}, fanout: {mean: 1}, profile: [{batch: 1, p50_ms: 1, p95_ms: 1}]}
  - name: b
    variants:
      - {name: y, accuracy: 1, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 1, p95_ms: 1}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(s.BatchSizes) != "[1]" || s.Tasks[0].Variants[0].Fanout.Shares["b"] != 1 {
		t.Errorf("defaults not applied: %v %v", s.BatchSizes, s.Tasks[0].Variants[0].Fanout.Shares)
	}
}

// TestParseErrors changes one thing of a valid spec at a time; each error names the field and what is wrong.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, old, new, want string
	}{
		{"batch size 0", "{batch: 1, p50_ms: 20", "{batch: 0, p50_ms: 20", "tasks[0].variants[0].profile[0].batch: minimum: got 0, want 1"},
		{"unknown field", "slo_ms: 500", "slo_ms: 500\nsloo: 1", "(spec): additional properties 'sloo' not allowed"},
		{"missing slo", "slo_ms: 500\n", "", "missing property 'slo_ms'"},
		{"bad pipeline name", "name: t", "name: T.x", "name: 'T.x' does not match pattern"},
		{"accuracy above 1", "accuracy: 0.9", "accuracy: 1.9", "tasks[0].variants[0].accuracy: maximum: got 1.9, want 1"},
		{"unknown executor", "executor: {kind: emulated}\n        fanout: {mean: 3", "executor: {kind: gpu}\n        fanout: {mean: 3", "tasks[0].variants[0].executor.kind: value must be one of 'emulated', 'onnx'"},
		{"onnx without model", "executor: {kind: emulated}\n        fanout: {mean: 3", "executor: {kind: onnx, program: ocr-detect}\n        fanout: {mean: 3", "tasks[0].variants[0].executor.model: an onnx executor needs the model file"},
		{"model of an emulated variant", "executor: {kind: emulated}\n        fanout: {mean: 3", "executor: {kind: emulated, model: a.onnx}\n        fanout: {mean: 3", "tasks[0].variants[0].executor: model, program, input_size and threads are for kind onnx"},
		{"tensor program with children", "executor: {kind: emulated}\n        fanout: {mean: 3", "executor: {kind: onnx, model: a.onnx}\n        fanout: {mean: 3", "tasks[0].variants[0].executor.program: program tensor emits no sub-requests"},
		{"profiles in Parse", "slo_ms: 500", "slo_ms: 500\nprofiles: p.yaml", "profiles: a profile file is relative to the spec file"},
		{"unknown child", "children: [cls, face]", "children: [cls, face, nope]", `tasks[0].children[2]: no task named "nope"`},
		{"two roots", "children: [cls, face]", "children: [cls]", "2 root tasks (det, face)"},
		{"duplicate task", "  - name: face\n", "  - name: cls\n", `tasks[2].name: task "cls" is also tasks[1]`},
		{"duplicate variant", "name: small", "name: big", `tasks[0].variants[1].name: variant "big" appears twice`},
		{"shares do not sum to 1", "shares: {cls: 0.7, face: 0.3}", "shares: {cls: 0.7, face: 0.2}", "tasks[0].variants[0].fanout.shares: shares sum to 0.9, want 1"},
		{"share for a non-child", "shares: {cls: 0.7, face: 0.3}", "shares: {cls: 0.7, nope: 0.3}", `tasks[0].variants[0].fanout.shares.nope: "nope" is not a child`},
		{"fanout missing", "        fanout: {mean: 2, shares: {cls: 0.5, face: 0.5}}\n", "", "tasks[0].variants[1]: fanout is required"},
		{"fanout on a leaf", "name: c1\n        accuracy: 0.8\n", "name: c1\n        accuracy: 0.8\n        fanout: {mean: 1}\n", "tasks[1].variants[0].fanout: task \"cls\" has no children"},
		{"batch missing from profile", "          - {batch: 4, p50_ms: 50, p95_ms: 60}\n", "", "tasks[0].variants[0].profile: batch size 4 missing"},
		{"batch not allowed", "{batch: 4, p50_ms: 50", "{batch: 8, p50_ms: 50", "tasks[0].variants[0].profile[1].batch: 8 is not in batch_sizes [1 4]"},
		{"p95 below p50", "p50_ms: 50, p95_ms: 60", "p50_ms: 50, p95_ms: 40", "tasks[0].variants[0].profile[1].p95_ms: 40 is below p50_ms 50"},
		{"latency falls with batch", "p50_ms: 50, p95_ms: 60", "p50_ms: 15, p95_ms: 60", "tasks[0].variants[0].profile[1].p50_ms: 15 is below the 20 of batch 1"},
		{"batch sizes not increasing", "batch_sizes: [1, 4]", "batch_sizes: [4, 1]", "batch_sizes[1]: 1 does not follow 4"},
		{"path not from root", "path: [det/big, cls/c1]", "path: [cls/c1]", `path_accuracy[0].path[0]: task "cls" cannot come here`},
		{"path stops early", "path: [det/big, cls/c1]", "path: [det/big]", "path_accuracy[0].path: ends before a leaf task"},
		{"path unknown variant", "path: [det/big, cls/c1]", "path: [det/big, cls/c9]", `path_accuracy[0].path[1]: task "cls" has no variant "c9"`},
		{"negative binomial without dispersion", "fanout: {mean: 3,", "fanout: {mean: 3, distribution: negative-binomial,", "tasks[0].variants[0].fanout.dispersion: required and > 0"},
		{"dispersion of a poisson", "fanout: {mean: 3,", "fanout: {mean: 3, dispersion: 2,", `tasks[0].variants[0].fanout.dispersion: only distribution "negative-binomial"`},
		{"dispersion not positive", "fanout: {mean: 3,", "fanout: {mean: 3, distribution: negative-binomial, dispersion: 0,", "tasks[0].variants[0].fanout.dispersion: exclusiveMinimum"},
		{"unknown distribution", "fanout: {mean: 3,", "fanout: {mean: 3, distribution: zipf,", "tasks[0].variants[0].fanout.distribution: value must be one of"},
		{"tensor declared twice", "slo_ms: 500", "slo_ms: 500\ninputs: [{name: image, datatype: BYTES, shape: [1]}, {name: image, datatype: BYTES, shape: [-1]}]", `inputs[1].name: tensor "image" is also inputs[0]`},
		{"output declared twice", "slo_ms: 500", "slo_ms: 500\noutputs: [{name: box, datatype: FP32, shape: [4]}, {name: box, datatype: FP64, shape: [4]}]", `outputs[1].name: tensor "box" is also outputs[0]`},
		{"unknown tensor datatype", "slo_ms: 500", "slo_ms: 500\noutputs: [{name: text, datatype: STRING, shape: [1]}]", "outputs[0].datatype: value must be one of"},
		{"priority above the highest class", "slo_ms: 500", "slo_ms: 500\npriority: 10", "priority: maximum: got 10, want 9"},
		{"cycle", "  - name: cls\n    variants:", "  - name: cls\n    children: [det]\n    variants:", "no root task"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(base, tc.old) {
				t.Fatalf("test edit %q not found in the base spec", tc.old)
			}
			_, err := Parse([]byte(strings.Replace(base, tc.old, tc.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestAllocationErrors(t *testing.T) {
	tests := []struct{ alloc, want string }{
		{"{task: nope, variant: big, replicas: 1, max_batch: 1}", `allocation[0].task: no task named "nope"`},
		{"{task: det, variant: nope, replicas: 1, max_batch: 1}", `allocation[0].variant: task "det" has no variant "nope"`},
		{"{task: det, variant: big, replicas: 1, max_batch: 2}", "allocation[0].max_batch: 2 is not in batch_sizes"},
		{"{task: det, variant: big, replicas: 0, max_batch: 1}", "allocation[0].replicas: minimum: got 0, want 1"},
	}
	for _, tc := range tests {
		_, err := Parse([]byte(base + "allocation:\n  - " + tc.alloc + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.alloc, err, tc.want)
		}
	}
	if _, err := Load("does/not/exist.yaml"); err == nil || !strings.Contains(err.Error(), "does/not/exist.yaml") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Parse([]byte("name: [")); err == nil || !strings.Contains(err.Error(), "not valid YAML") {
		t.Errorf("bad YAML: %v", err)
	}
}

// capacity is the root demand that workers can serve with one given variant per task, choosing the batch sizes
// (each path's latencies within half the SLO) and splitting the workers fractionally: the hardware-scaling bound.
func capacity(s *Spec, choice map[string]*Variant, workers float64) float64 {
	best := 0.0
	var tasks []string
	for _, t := range s.Tasks {
		tasks = append(tasks, t.Name)
	}
	// demand per unit root QPS reaching each task.
	load := map[string]float64{s.Root().Name: 1}
	for _, chain := range s.Chains() {
		for i := 1; i < len(chain); i++ {
			f := choice[chain[i-1]].Fanout
			load[chain[i]] = load[chain[i-1]] * f.Mean * f.Shares[chain[i]]
		}
	}
	var try func(i int, batch map[string]int)
	try = func(i int, batch map[string]int) {
		if i == len(tasks) {
			for _, chain := range s.Chains() {
				total := 0.0
				for _, task := range chain {
					total += choice[task].LatencyFor(batch[task]).P50Ms + s.CommLatencyMs
				}
				if total > s.SLOMs/2 {
					return
				}
			}
			perQPS := 0.0
			for _, task := range tasks {
				perQPS += load[task] / choice[task].Throughput(batch[task])
			}
			best = math.Max(best, workers/perQPS)
			return
		}
		for _, b := range s.BatchSizes {
			batch[tasks[i]] = b
			try(i+1, batch)
		}
	}
	try(0, map[string]int{})
	return best
}

func fastest(t *Task) *Variant {
	f := &t.Variants[0]
	for i := range t.Variants {
		if t.Variants[i].Profile[0].P50Ms < f.Profile[0].P50Ms {
			f = &t.Variants[i]
		}
	}
	return f
}

// TestExamples loads the shipped examples and checks the numbers their comments claim.
// Every example declares its inputs and outputs (the HTTP API's model metadata), and they survive the KV's JSON.
func TestExamplesDeclareTensors(t *testing.T) {
	for _, name := range []string{"traffic", "traffic-camera", "ocr-chain", "ocr"} {
		file := "../../examples/" + name + ".yaml"
		s, err := LoadForProfiling(file)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Inputs) == 0 || len(s.Outputs) == 0 {
			t.Errorf("%s declares %d inputs and %d outputs, want some of each", file, len(s.Inputs), len(s.Outputs))
		}
		js, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseJSON(js)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(back.Inputs, back.Outputs) != fmt.Sprint(s.Inputs, s.Outputs) {
			t.Errorf("%s: declared tensors %v %v after JSON, want %v %v", file, back.Inputs, back.Outputs, s.Inputs, s.Outputs)
		}
	}
}

func TestExamples(t *testing.T) {
	for _, tc := range []struct {
		file            string
		minHW, maxHW    float64 // capacity of the most accurate variants with 20 workers
		minSpeedup      float64 // fastest over most accurate
		demand, maxUtil float64
		maxReplicas     int
	}{
		{"../../examples/traffic.yaml", 250, 420, 2.5, 200, 0.70, 20},
		{"../../examples/ocr-chain.yaml", 200, 2000, 1.5, 200, 0.70, 20},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s, err := Load(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			acc, fast := map[string]*Variant{}, map[string]*Variant{}
			for i := range s.Tasks {
				acc[s.Tasks[i].Name] = s.Tasks[i].MostAccurate()
				fast[s.Tasks[i].Name] = fastest(&s.Tasks[i])
			}
			hw := capacity(s, acc, 20)
			if hw < tc.minHW || hw > tc.maxHW {
				t.Errorf("most accurate variants serve %.0f QPS with 20 workers, want %.0f..%.0f", hw, tc.minHW, tc.maxHW)
			}
			if sp := capacity(s, fast, 20) / hw; sp < tc.minSpeedup {
				t.Errorf("fastest variants serve %.2fx the most accurate, want at least %.1fx", sp, tc.minSpeedup)
			}
			t.Logf("capacity with 20 workers: most accurate %.0f QPS, fastest %.0f QPS", hw, capacity(s, fast, 20))
			// The static allocation serves the demand with every variant under maxUtil.
			load := map[string]float64{s.Root().Name: tc.demand}
			replicas := 0
			for _, a := range s.Allocation {
				replicas += a.Replicas
			}
			if replicas > tc.maxReplicas {
				t.Errorf("allocation uses %d replicas, more than %d", replicas, tc.maxReplicas)
			}
			// The demand goes to each task's most accurate allocated variant first (the other ones take overflow).
			first := map[string]*Variant{}
			for _, a := range s.Allocation {
				if v := s.Variant(a.Task, a.Variant); first[a.Task] == nil || v.Accuracy > first[a.Task].Accuracy {
					first[a.Task] = v
				}
			}
			for _, chain := range s.Chains() {
				for i := 1; i < len(chain); i++ {
					up := first[chain[i-1]]
					load[chain[i]] = load[chain[i-1]] * up.Fanout.Mean * up.Fanout.Shares[chain[i]]
				}
			}
			for _, a := range s.Allocation {
				v := s.Variant(a.Task, a.Variant)
				if v != first[a.Task] {
					continue
				}
				util := load[a.Task] / (float64(a.Replicas) * v.Throughput(a.MaxBatch))
				if util > tc.maxUtil {
					t.Errorf("%s/%s at %.0f items/s is %.0f%% utilised, want at most %.0f%%", a.Task, a.Variant, load[a.Task], 100*util, 100*tc.maxUtil)
				}
			}
		})
	}
}
