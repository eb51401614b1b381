package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/core"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestRehomeExcessOfACutVariant: at a look after a plan that cut a variant's replicas, the simulator moves the
// oldest of what waits there beyond its replicas' next batches to the task's other variant, a hop away, as the live
// planner does (core.Pipeline.Excess, plan.Sibling); without the look (the once-a-second move) the queue stays.
func TestRehomeExcessOfACutVariant(t *testing.T) {
	s, err := newSim(Config{Spec: traffic(t), Workload: workload.Constant(100, time.Second), Servers: 20,
		System: "loki", Seed: 1, CommLatency: -1})
	if err != nil {
		t.Fatal(err)
	}
	p0 := s.pipes[0]
	cp := s.core.Pipelines()[0]
	next := *p0.plan
	next.Epoch++
	next.Variants = slices.Clone(p0.plan.Variants)
	i := slices.IndexFunc(next.Variants, func(v plan.VariantPlan) bool { return v.Variant == "effnet_b7" })
	if i < 0 || next.Variants[i].Replicas < 2 || !next.Hosts("classify_car", "effnet_b0") {
		t.Fatalf("the first plan %+v: want effnet_b7 on two replicas or more, and effnet_b0", next.Variants)
	}
	next.Variants[i].Replicas = 1
	next.Routing = plan.Routing{Root: []plan.Route{{Variant: "yolov5x", Prob: 1}},
		Downstream: map[string]map[string][]plan.Route{"detect/yolov5x": {
			"classify_car": {{Variant: "effnet_b7", Prob: 0.5}, {Variant: "effnet_b0", Prob: 0.5}}}}}
	s.core.Published(core.Decision{Pipeline: cp, Step: control.Step{Plan: &next, Replanned: true}}, s.time(),
		s.cluster)
	p0.plan = &next
	cut, to := p0.queueIdx["classify_car"]["effnet_b7"], p0.queueIdx["classify_car"]["effnet_b0"]
	after := p0.trie.child(0, p0.queueIdx["detect"]["yolov5x"])
	r := &request{pipe: p0, due: int64(time.Minute)}
	var queued []*message
	for range 30 {
		queued = append(queued, &message{req: r, items: 1, node: after})
	}
	s.queues[cut].queue = slices.Clone(queued)
	s.events = eventHeap{}
	s.rehome(p0, nil)
	if n := s.queues[cut].pending(); n != 30 || len(s.events.ev) != 0 {
		t.Fatalf("the once-a-second move left %d of 30 and moved %d: want the hosted queue kept", n, len(s.events.ev))
	}
	s.rehome(p0, cp)
	keep := plan.ExcessBatches * next.Variants[i].MaxBatch
	if q := s.queues[cut].queue[s.queues[cut].head:]; !slices.Equal(q, queued[30-keep:]) {
		t.Errorf("the cut variant kept %d messages, want its newest %d", len(q), keep)
	}
	if n := len(deliveredTo(t, s, to, p0.comm)); n != 30-keep {
		t.Errorf("%d messages moved to effnet_b0, want %d", n, 30-keep)
	}
}

// deliveredTo are the messages s's pending events deliver to queue to, a hop (comm) from now; any other event is an
// error.
func deliveredTo(t *testing.T, s *sim, to int32, comm int64) []*message {
	t.Helper()
	var out []*message
	for _, e := range s.events.ev {
		if e.kind != evDeliver || e.target != to || e.at != s.now+comm {
			t.Errorf("unexpected event %+v: want deliveries to queue %d one hop from now", e, to)
			continue
		}
		out = append(out, s.msgs[e.msg])
	}
	return out
}
