package planner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/core"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestRehomeMovesTheExcessOfACutVariant: in the seconds after a plan that cut a variant's replicas, a look moves
// what waits there beyond its replicas' next batches (plan.Excess) to the task's other hosted variant, the oldest
// first; the messages a variant the plan did not cut holds stay, and so does all of it at the once-a-second move.
func TestRehomeMovesTheExcessOfACutVariant(t *testing.T) {
	p, sp, js, stream := movesPlanner(t)
	ctx := context.Background()
	ensureConsumersOfB(t, js, sp)
	routing := plan.Routing{Root: []plan.Route{{Variant: "x", Prob: 1}}, Downstream: map[string]map[string][]plan.Route{
		"a/x": {"b": {{Variant: "y", Prob: 0.5}, {Variant: "z", Prob: 0.5}}}}}
	old := &plan.Plan{Pipeline: sp.Name, Variants: []plan.VariantPlan{{Task: "a", Variant: "x", Replicas: 1, MaxBatch: 1},
		{Task: "b", Variant: "y", Replicas: 3, MaxBatch: 1}, {Task: "b", Variant: "z", Replicas: 1, MaxBatch: 1}},
		Routing: routing}
	next := &plan.Plan{Pipeline: sp.Name, Epoch: 1, Variants: []plan.VariantPlan{
		{Task: "a", Variant: "x", Replicas: 1, MaxBatch: 1}, {Task: "b", Variant: "y", Replicas: 1, MaxBatch: 1},
		{Task: "b", Variant: "z", Replicas: 3, MaxBatch: 1}}, Routing: routing}
	cp := p.core.Pipelines()[0]
	if err := p.core.Begin(cp, old, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	deadline := wire.FormatDeadline(time.Now().Add(time.Minute))
	publish := func(variant string, n int) {
		for i := range n {
			m := nats.NewMsg(wire.TaskSubject(sp.Name, "b", variant))
			m.Header.Set(wire.HeaderPath, "a/x")
			id := fmt.Sprintf("%s-%d", variant, i)
			m.Header.Set(wire.HeaderRequestID, id)
			m.Header.Set(wire.HeaderDeadline, deadline)
			m.Header.Set(wire.HeaderMsgID, wire.TaskMsgID(id, "0", "b", variant))
			m.Data = []byte{byte(i)}
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("y", 6)
	publish("z", 5)
	waitCounted(t, js, sp, "b", "y", 6)
	counts := func() (y, z uint64) {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(wire.TaskSubjects(sp.Name)))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[wire.TaskSubject(sp.Name, "b", "y")], info.State.Subjects[wire.TaskSubject(sp.Name, "b", "z")]
	}
	p.core.Published(core.Decision{Pipeline: cp, Step: control.Step{Plan: next, Replanned: true}}, time.Now(),
		plan.Uniform(5))
	p.rehome(ctx, sp, next, nil, nil) // the once-a-second move: only retired variants
	if y, z := counts(); y != 6 || z != 5 {
		t.Fatalf("after the once-a-second move: %d at b/y and %d at b/z, want 6 and 5: hosted queues stay", y, z)
	}
	p.rehome(ctx, sp, next, cp, nil) // a look after the plan that cut b/y from 3 replicas to 1
	keep := plan.ExcessBatches * 1 * 1
	if y, z := counts(); y != uint64(keep) || z != 5+uint64(6-keep) {
		t.Fatalf("after a look: %d at b/y and %d at b/z, want %d kept at the cut b/y and the rest moved to b/z",
			y, z, keep)
	}
	// The oldest were moved: what b/y keeps is its newest.
	cons, err := js.Consumer(ctx, wire.TaskStream(sp.Name), wire.Consumer("b", "y"))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(keep, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	first := 6 - keep
	for m := range batch.Messages() {
		if i := int(m.Data()[0]); i != first {
			t.Errorf("b/y kept message %d, want %d (its newest %d)", i, first, keep)
		}
		first++
		_ = m.Ack()
	}
}

// ensureConsumersOfB declares the consumers of treeSpec's task b, both its variants, as the planner does for a plan
// that hosts them.
func ensureConsumersOfB(t *testing.T, js jetstream.JetStream, sp *pipeline.Spec) {
	t.Helper()
	for _, v := range []string{"y", "z"} {
		if _, err := bus.EnsureVariantConsumer(context.Background(), js, sp.Name, "b", v, time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

// waitCounted waits until the consumer of task/variant counts n messages pending. A stream counts a message when it
// acknowledges its publish, its consumers a moment later (the server signals them from a goroutine of its own), and
// rehome moves what the consumer counts: a look just after the publishes found 0 pending in 1 run of 30.
func waitCounted(t *testing.T, js jetstream.JetStream, sp *pipeline.Spec, task, variant string, n uint64) {
	t.Helper()
	ctx := context.Background()
	if err := testrig.WaitFor(5*time.Second, fmt.Sprintf("%d messages pending at %s/%s", n, task, variant), func() bool {
		c, err := js.Consumer(ctx, wire.TaskStream(sp.Name), wire.Consumer(task, variant))
		return err == nil && c.CachedInfo().NumPending == n
	}); err != nil {
		t.Fatal(err)
	}
}

// movesPlanner is a planner of treeSpec on a real JetStream server, with its task stream declared (as its Run would:
// the tests call its steps themselves).
func movesPlanner(t *testing.T) (*Planner, *pipeline.Spec, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	nc := testrig.Server(t).Connect(t, "planner")
	sp, err := pipeline.Parse([]byte(treeSpec))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(nc, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	js := testrig.JetStream(t, nc)
	stream, err := bus.EnsureTaskStream(context.Background(), js, sp.Name, jetstream.MemoryStorage, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p, sp, js, stream
}

// TestQueuesReadOncePerPipeline: the once-a-second move and the tuner's look read a pipeline's queues with one
// request for its task stream, and look up a variant's consumer only where messages wait that the move may take:
// with every queue empty, no consumer is looked up; with messages at a retired variant, that variant's alone.
func TestQueuesReadOncePerPipeline(t *testing.T) {
	p, sp, js, _ := movesPlanner(t)
	ctx := context.Background()
	ensureConsumersOfB(t, js, sp)
	requests := func(subject string) func() int {
		sub, err := p.nc.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return func() int {
			n := 0
			for {
				if _, err := sub.NextMsg(100 * time.Millisecond); err != nil {
					return n
				}
				n++
			}
		}
	}
	consumerInfos, streamInfos := requests("$JS.API.CONSUMER.INFO.>"), requests("$JS.API.STREAM.INFO.>")
	pl := &plan.Plan{Pipeline: sp.Name, Variants: []plan.VariantPlan{{Task: "a", Variant: "x", Replicas: 1},
		{Task: "b", Variant: "z", Replicas: 1}}, Routing: plan.Routing{Root: []plan.Route{{Variant: "x", Prob: 1}},
		Downstream: map[string]map[string][]plan.Route{"a/x": {"b": {{Variant: "z", Prob: 1}}}}}}
	p.rehome(ctx, sp, pl, nil, nil)
	if _, _, err := p.queueDepths(ctx, pl); err != nil {
		t.Fatal(err)
	}
	if c, s := consumerInfos(), streamInfos(); c != 0 || s > 3 {
		t.Errorf("empty queues: %d consumer lookups and %d stream requests, want none and at most 3", c, s)
	}
	m := nats.NewMsg(wire.TaskSubject(sp.Name, "b", "y"))
	m.Header.Set(wire.HeaderPath, "a/x")
	m.Header.Set(wire.HeaderRequestID, "r")
	m.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(time.Now().Add(time.Minute)))
	m.Header.Set(wire.HeaderMsgID, wire.TaskMsgID("r", "0", "b", "y"))
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitCounted(t, js, sp, "b", "y", 1)
	consumerInfos()
	p.rehome(ctx, sp, pl, nil, nil) // b/y is retired: its message moves to b/z
	if c := consumerInfos(); c != 1 {
		t.Errorf("a message at the retired b/y: %d consumer lookups, want 1 (b/y's)", c)
	}
	depths, counts, err := p.queueDepths(ctx, pl)
	if err != nil {
		t.Fatal(err)
	}
	if depths["b/z"] != 1 || depths["a/x"] != 0 {
		t.Errorf("depths after the move %v, want b/z 1 and a/x 0", depths)
	}
	// A look's move reads nothing again: it is given the counts the look read (b/y empty now, b/z hosted).
	streamInfos()
	p.rehome(ctx, sp, pl, nil, counts)
	if c, s := consumerInfos(), streamInfos(); c != 0 || s != 0 {
		t.Errorf("a move given the look's counts: %d consumer lookups and %d stream requests, want none", c, s)
	}
}
