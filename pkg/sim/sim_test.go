package sim

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

func traffic(t testing.TB) *pipeline.Spec {
	t.Helper()
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestDeterministic: two runs with the same seed are the same run, at a demand the plans must scale accuracy for
// (where the MILP, not the hardware enumeration, chooses them).
func TestDeterministic(t *testing.T) {
	spec := traffic(t)
	cfg := Config{Spec: spec, Workload: workload.Constant(700, 10*time.Second), Servers: 20,
		System: "loki", Seed: 42, CommLatency: -1}
	a, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(a.Seconds, func(s Second) bool { return s.Mode == plan.ModeAccuracy }) {
		t.Fatal("no second ran an accuracy-scaling plan: the MILP chose none of the plans")
	}
	b, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Summary.WallSeconds, b.Summary.WallSeconds, a.Summary.PlanSeconds, b.Summary.PlanSeconds = 0, 0, 0, 0
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs with the same seed differ:\n%+v\n%+v", a.Summary, b.Summary)
	}
	cfg.Seed = 43
	c, _ := Run(cfg)
	if c.Summary.ItemHops == a.Summary.ItemHops {
		t.Fatal("another seed gave the same run")
	}
}

// TestEveryRequestAnswered: on a cluster that can serve the load, every request gets exactly one reply by the end,
// none is stuck, and the replies account for every arrival without the end-of-run fill-in.
func TestEveryRequestAnswered(t *testing.T) {
	spec := traffic(t)
	for _, name := range []string{"loki", "loki:none", "loki:per-task", "loki:last-task", "inferline", "proteus"} {
		s, err := newSim(Config{Spec: spec, Workload: workload.Constant(150, 30*time.Second), Servers: 20,
			System: name, Seed: 1, CommLatency: -1})
		if err != nil {
			t.Fatal(err)
		}
		s.run()
		if s.inFlight != 0 {
			t.Errorf("%s: %d requests never answered", name, s.inFlight)
		}
		arrivals, replies, hopsOK := 0, 0, 0
		for _, x := range s.pipes[0].seconds {
			arrivals += x.Arrivals
			replies += x.OK + x.Partial + x.Dropped + x.Late + x.Refused
			hopsOK += x.OK
		}
		if arrivals == 0 || replies != arrivals {
			t.Errorf("%s: %d arrivals, %d replies", name, arrivals, replies)
		}
		if float64(hopsOK) < 0.9*float64(arrivals) {
			t.Errorf("%s: only %d of %d requests ok at a load the cluster serves", name, hopsOK, arrivals)
		}
	}
}

// TestSystems checks what sets the systems apart, on the traffic example with 20 servers: at low demand Loki and
// InferLine scale hardware down while Proteus keeps every server; past InferLine's capacity, InferLine keeps the
// most accurate variants and misses deadlines, while Loki scales accuracy and serves.
func TestSystems(t *testing.T) {
	spec := traffic(t)
	run := func(name string, qps float64) Summary {
		res, err := Run(Config{Spec: spec, Workload: workload.Constant(qps, 45*time.Second), Warmup: 15 * time.Second,
			Servers: 20, System: name, Seed: 1, CommLatency: -1})
		if err != nil {
			t.Fatal(err)
		}
		return res.Summary
	}
	low := map[string]Summary{}
	for _, name := range []string{"loki", "inferline", "proteus"} {
		low[name] = run(name, 60)
	}
	if low["proteus"].MeanActiveServers != 20 || low["loki"].MeanActiveServers > 10 ||
		low["inferline"].MeanActiveServers > 10 {
		t.Errorf("active servers at 60 QPS: loki %.1f, inferline %.1f, proteus %.1f; want loki and inferline "+
			"well under 20, proteus 20", low["loki"].MeanActiveServers, low["inferline"].MeanActiveServers,
			low["proteus"].MeanActiveServers)
	}
	loki, inferline := run("loki", 700), run("inferline", 700)
	if inferline.SLOViolationRatio < 0.3 {
		t.Errorf("inferline at 700 QPS: %.1f%% SLO violations; want most requests missing their deadline",
			100*inferline.SLOViolationRatio)
	}
	if loki.SLOViolationRatio > 0.1 || loki.MeanAccuracy >= 0.44 {
		t.Errorf("loki at 700 QPS: %.1f%% SLO violations at accuracy %.3f; want accuracy scaling serving it",
			100*loki.SLOViolationRatio, loki.MeanAccuracy)
	}
}

// TestCapacity: Loki's effective capacity is at least 2.5 times InferLine's (Loki's section 6.2).
func TestCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("capacity search: a few dozen simulated minutes")
	}
	spec := traffic(t)
	cs := CapacitySearch{Warmup: 15 * time.Second, Measure: 30 * time.Second, Precision: 0.05}
	capOf := func(name string) float64 {
		q, probes, err := Capacity(Config{Spec: spec, Servers: 20, System: name, Seed: 1,
			CommLatency: -1}, cs)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.1f QPS (%d probes)", name, q, len(probes))
		return q
	}
	inferline, loki := capOf("inferline"), capOf("loki")
	if inferline <= 0 || loki < 2.5*inferline {
		t.Fatalf("effective capacity: loki %.1f QPS, inferline %.1f: want at least 2.5x", loki, inferline)
	}
}

// TestStaticSystem: the static system keeps the spec's allocation (20 replicas) whatever the demand, where Loki's
// planner scales down to a few workers at 60 QPS.
func TestStaticSystem(t *testing.T) {
	spec := traffic(t)
	for _, name := range []string{"static", "loki"} {
		r, err := Run(Config{Spec: spec, Workload: workload.Constant(60, 30*time.Second), Warmup: 15 * time.Second,
			Servers: 20, System: name, Seed: 1, CommLatency: -1})
		if err != nil {
			t.Fatal(err)
		}
		sum := r.Summary
		static := name == "static"
		if static != (sum.Replans == 0) || static != (sum.MeanActiveServers == 20) {
			t.Errorf("%s: %d re-plans, %.1f active servers", name, sum.Replans, sum.MeanActiveServers)
		}
	}
}

func TestReport(t *testing.T) {
	spec := traffic(t)
	var results []*Result
	for _, name := range []string{"loki", "proteus"} {
		r, err := Run(Config{Spec: spec, Workload: workload.Diurnal(20, 200, 60*time.Second, time.Second),
			Servers: 20, System: name, Seed: 1, CommLatency: -1})
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	dir := t.TempDir()
	if err := WriteReport(dir, "test", results, 5); err != nil {
		t.Fatal(err)
	}
	csvData, err := os.ReadFile(filepath.Join(dir, "loki_reroute.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(csvData), "\n"); lines != 13 { // header + 12 intervals of 5 s
		t.Fatalf("loki_reroute.csv has %d lines", lines)
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "figure.svg"))
	if strings.Count(string(svg), "<polyline") != 4*2+1 { // 4 panels x 2 systems, and the workload's demand
		t.Fatalf("figure.svg: %d lines", strings.Count(string(svg), "<polyline"))
	}
	pngData, _ := os.ReadFile(filepath.Join(dir, "figure.png"))
	if _, err := png.Decode(bytes.NewReader(pngData)); err != nil {
		t.Fatalf("figure.png: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "summary.json")); err != nil {
		t.Fatal(err)
	}
}

// TestBatchFitsMaxBatch: a replica's batch takes messages from the head of its variant's queue while their items fit
// its max batch (only a first message may exceed it alone); a message that does not fit stays at the head of the
// queue, with those behind it, as the live worker's naks leave it.
func TestBatchFitsMaxBatch(t *testing.T) {
	spec := traffic(t)
	for _, tc := range []struct {
		name      string
		items     []int // per queued message
		wantTaken int   // messages in the batch
	}{
		{"pairs", []int{2, 2, 2, 2, 2, 2}, 2},
		{"singles", []int{1, 1, 1, 1, 1, 1}, 4},
		{"a pair after three singles", []int{1, 1, 1, 2, 1}, 3},
		{"oversized first", []int{6, 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := newSim(Config{Spec: spec, Workload: workload.Constant(100, time.Second), Servers: 20,
				System: "loki:none", Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			srv := -1
			for i := range s.servers {
				if s.servers[i].queue >= 0 {
					srv = i
					break
				}
			}
			if srv < 0 {
				t.Fatal("no server hosts a variant")
			}
			sv := &s.servers[srv]
			sv.maxBatch = 4
			h := s.queues[sv.queue]
			r := &request{due: int64(time.Minute)}
			var queued []*message
			for _, n := range tc.items {
				m := &message{req: r, items: n, den: 1}
				queued = append(queued, m)
				h.queue = append(h.queue, m)
			}
			s.startBatch(srv)
			if len(sv.batch) != tc.wantTaken {
				t.Fatalf("the batch took %d messages, want %d", len(sv.batch), tc.wantTaken)
			}
			if h.pending() != len(tc.items)-tc.wantTaken ||
				h.pending() > 0 && h.queue[h.head] != queued[tc.wantTaken] {
				t.Errorf("the queue holds %d messages, want the %d after the batch's, in order", h.pending(),
					len(tc.items)-tc.wantTaken)
			}
		})
	}
}

// TestRehome: a published plan that hosts no replica of a variant sends the messages queued there on to the variant
// its routing picks for their task from their upstream hop, a hop away, and leaves those it routes nowhere; the
// queues of hosted variants stay as they are.
func TestRehome(t *testing.T) {
	spec := traffic(t)
	s, err := newSim(Config{Spec: spec, Workload: workload.Constant(100, time.Second), Servers: 20,
		System: "loki", Seed: 1, CommLatency: -1})
	if err != nil {
		t.Fatal(err)
	}
	p0 := s.pipes[0]
	static := p0.plan
	queueOf := func(task, variant string) int32 { return p0.queueIdx[task][variant] }
	retired, to := queueOf("classify_car", "effnet_b7"), queueOf("classify_car", "effnet_b0")
	hosted := queueOf("classify_car", "effnet_b1")
	after := p0.trie.child(0, queueOf("detect", "yolov5x"))    // routed to effnet_b0 by the new plan
	unrouted := p0.trie.child(0, queueOf("detect", "yolov5n")) // no table from there
	p := &plan.Plan{Variants: []plan.VariantPlan{{Task: "detect", Variant: "yolov5x", Replicas: 1},
		{Task: "classify_car", Variant: "effnet_b0", Replicas: 1}, {Task: "classify_car", Variant: "effnet_b1", Replicas: 1},
		{Task: "recognize_face", Variant: "arcface_r100", Replicas: 1}},
		Routing: plan.Routing{Root: []plan.Route{{Variant: "yolov5x", Prob: 1}},
			Downstream: map[string]map[string][]plan.Route{"detect/yolov5x": {
				"classify_car": {{Variant: "effnet_b0", Prob: 1}}, "recognize_face": {{Variant: "arcface_r100", Prob: 1}}}}}}
	r := &request{pipe: p0, due: int64(time.Minute)}
	moved := []*message{{req: r, items: 1, node: after}, {req: r, items: 2, node: after}}
	stays := &message{req: r, items: 1, node: unrouted}
	s.queues[retired].queue = []*message{moved[0], stays, moved[1]}
	s.queues[hosted].queue = []*message{{req: r, items: 1, node: after}}
	s.events = eventHeap{}
	p0.plan = p
	s.rehome(p0, nil)

	if q := s.queues[retired].queue[s.queues[retired].head:]; len(q) != 1 || q[0] != stays {
		t.Errorf("the retired variant's queue holds %d messages, want only the one routed nowhere", len(q))
	}
	if s.queues[hosted].pending() != 1 {
		t.Errorf("a hosted variant's queue moved: %d messages left of 1", s.queues[hosted].pending())
	}
	delivered := deliveredTo(t, s, to, p0.comm)
	if len(delivered) != 2 || !slices.Contains(delivered, moved[0]) || !slices.Contains(delivered, moved[1]) {
		t.Errorf("delivered %d messages to effnet_b0, want the 2 routed there", len(delivered))
	}

	// The simulated planner's tick does it under the plan in force (the static plan: effnet_b7 after yolov5x).
	s.events = eventHeap{}
	p0.plan = static
	stranded := &message{req: r, items: 1, node: after}
	s.queues[to].queue, s.queues[to].head = []*message{stranded}, 0
	s.tick()
	if s.queues[to].pending() != 0 || !slices.ContainsFunc(s.events.ev, func(e event) bool {
		return e.kind == evDeliver && s.msgs[e.msg] == stranded && e.target == queueOf("classify_car", "effnet_b7")
	}) {
		t.Error("a tick left a message at a variant the plan in force does not host")
	}
}

// TestCameraHoldsItsSLO: the traffic camera (examples/traffic-camera.yaml: 2 to 18 vehicles a frame, negative
// binomial) at 10%, 50% and 90% of the demand its most accurate variants serve on 20 servers in Loki's model (90
// QPS): the plans budget each frame's burst and the queues it makes, and miss under 1% of the deadlines. With Loki's
// model alone (and the sub-requests split over the replicas) they missed 34%, 11% and 2%: at 9 QPS two
// classifiers for bursts of up to 41, and a single unbatched detector 65% busy.
func TestCameraHoldsItsSLO(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic-camera.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, qps := range []float64{9, 45, 81} {
		res, err := Run(Config{Spec: spec, Workload: workload.Constant(qps, 40*time.Second), Servers: 20,
			System: "loki", Seed: 1, CommLatency: -1, Warmup: 15 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Summary
		t.Logf("%v QPS: %.2f%% violations, accuracy %.4f, %.1f servers", qps, 100*s.SLOViolationRatio,
			s.MeanAccuracy, s.MeanActiveServers)
		if s.SLOViolationRatio >= 0.01 {
			t.Errorf("%v QPS: %.2f%% of the deadlines missed, want under 1%%", qps, 100*s.SLOViolationRatio)
		}
	}
}
