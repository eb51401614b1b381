package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/batching"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// oneTask has a single (leaf) task with a slow and a fast variant.
const oneTask = `
name: one
slo_ms: 1000
batch_sizes: [1, 4]
tasks:
  - name: a
    variants:
      - name: slow
        accuracy: 0.9
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 30, p95_ms: 31}, {batch: 4, p50_ms: 30, p95_ms: 31}]
      - name: fast
        accuracy: 0.8
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 2, p95_ms: 3}, {batch: 4, p50_ms: 2, p95_ms: 3}]
allocation:
  - {task: a, variant: slow, replicas: 1, max_batch: 1}
  - {task: a, variant: fast, replicas: 1, max_batch: 1}
`

// rig is a real embedded JetStream server with the pipeline's spec, plan and stream in place; the test plays the
// planner (writing assignments) and the frontend (listening on a result subject).
type rig struct {
	t       testing.TB
	srv     *testrig.Embedded
	nc      *nats.Conn
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	spec    *pipeline.Spec
	plan    *plan.Plan // hosts what the rig assigned; epoch 1
	results chan wire.ResultMessage
	reply   string
}

func newRig(t testing.TB) *rig { return newRigWith(t, oneTask) }

func newRigWith(t testing.TB, specYAML string) *rig { return newRigAckWait(t, specYAML, 0) }

// newRigAckWait is newRigWith with the variant consumers' ack wait (0: the default), which their redelivery
// backoff follows (bus.TaskBackOff).
func newRigAckWait(t testing.TB, specYAML string, ackWait time.Duration) *rig {
	t.Helper()
	srv := testrig.Server(t)
	nc := srv.Connect(t, "test")
	js := testrig.JetStream(t, nc)
	ctx := context.Background()
	// The planner's part, with its own functions: the bucket, the stream, and every variant's consumer, which
	// workers only bind.
	kv, err := bus.OpenBucket(ctx, js, jetstream.MemoryStorage, 0)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := pipeline.Parse([]byte(specYAML))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureTaskStream(ctx, js, spec.Name, jetstream.MemoryStorage, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureDeadLetterStream(ctx, js, jetstream.MemoryStorage, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	for _, task := range spec.Tasks {
		for _, v := range task.Variants {
			if _, err := bus.EnsureVariantConsumer(ctx, js, spec.Name, task.Name, v.Name, ackWait); err != nil {
				t.Fatal(err)
			}
		}
	}
	p, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	p.Epoch = 1
	p.Routing = routing.MostAccurateFirst(routing.Input{Spec: spec, Plan: p})
	put := func(key string, v any) {
		data, _ := json.Marshal(v)
		if _, err := kv.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	put(wire.SpecKey(spec.Name), spec)
	put(wire.PlanKey(spec.Name), p)
	r := &rig{t: t, srv: srv, nc: nc, js: js, kv: kv, spec: spec, plan: p, results: make(chan wire.ResultMessage, 1000),
		reply: wire.ResultSubject("test")}
	if _, err := nc.Subscribe(r.reply, func(m *nats.Msg) {
		var rm wire.ResultMessage
		if err := msgpack.Unmarshal(m.Data, &rm); err != nil {
			t.Errorf("undecodable result: %v", err)
			return
		}
		r.results <- rm
		// The rig plays the frontend: it confirms every result message it has recorded.
		if m.Reply != "" {
			_ = m.Respond(nil)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) startWorker(id string) *Worker {
	return r.startWorkerWith(Config{ID: id, FetchWait: 100 * time.Millisecond})
}

func (r *rig) startWorkerWith(cfg Config) *Worker { return r.startWorkerOn(r.nc, cfg) }

// startWorkerOn starts a worker on its own connection nc.
func (r *rig) startWorkerOn(nc *nats.Conn, cfg Config) *Worker {
	r.t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)

	w, err := New(nc, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	testrig.Run(r.t, "worker "+cfg.ID, w.Run)
	return w
}

func (r *rig) assign(worker, variant string) { r.assignTask(worker, "a", variant, 1) }

func (r *rig) assignTask(worker, task, variant string, maxBatch int) {
	r.t.Helper()
	// The plan hosts what the worker is assigned (a worker follows no other assignment), under the same epoch.
	if vp := r.plan.Find(task, variant); vp != nil {
		vp.MaxBatch = maxBatch
	} else {
		r.plan.Variants = append(r.plan.Variants, plan.NewVariantPlan(task, r.spec.Variant(task, variant), 1, maxBatch))
	}
	r.plan.Routing = routing.MostAccurateFirst(routing.Input{Spec: r.spec, Plan: r.plan})
	data, _ := json.Marshal(r.plan)
	if _, err := r.kv.Put(context.Background(), wire.PlanKey(r.spec.Name), data); err != nil {
		r.t.Fatal(err)
	}
	a := plan.Assignment{Worker: worker, Pipeline: r.spec.Name, Task: task, Variant: variant, MaxBatch: maxBatch,
		Epoch: r.plan.Epoch}
	data, _ = json.Marshal(a)
	if _, err := r.kv.Put(context.Background(), wire.AssignKey(worker), data); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) waitServing(w *Worker, variant string) { r.waitServingTask(w, "a", variant) }

func (r *rig) waitServingTask(w *Worker, task, variant string) {
	r.t.Helper()
	want := r.spec.Name + ":" + task + "/" + variant
	if err := testrig.WaitFor(5*time.Second, fmt.Sprintf("worker %s serves %q", w.ID(), want), func() bool {
		return w.Serving() == want
	}); err != nil {
		r.t.Fatalf("%v: it serves %q", err, w.Serving())
	}
}

// publish enqueues a task message for variant with the given headers (nil: valid ones) and payload (nil: valid).
func (r *rig) publish(variant, requestID string, deadline time.Time, hdr nats.Header, data []byte) {
	r.t.Helper()
	r.publishTo("a", variant, requestID, deadline, hdr, data)
}

// publishTo enqueues a task message for task/variant, as publish does.
func (r *rig) publishTo(task, variant, requestID string, deadline time.Time, hdr nats.Header, data []byte) {
	r.t.Helper()
	m := nats.NewMsg(wire.TaskSubject(r.spec.Name, task, variant))
	if hdr == nil {
		hdr = nats.Header{}
		hdr.Set(wire.HeaderRequestID, requestID)
		hdr.Set(wire.HeaderDeadline, wire.FormatDeadline(deadline))
		hdr.Set(wire.HeaderReplyTo, r.reply)
	}
	m.Header = hdr
	if data == nil {
		data, _ = msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: "0", Den: 1}}})
	}
	m.Data = data
	if _, err := r.js.PublishMsg(context.Background(), m); err != nil {
		r.t.Fatal(err)
	}
}

// waitPending waits until task/variant's consumer counts n messages pending. The first delivery's NumPending, which
// the batching rule reads, can lag the messages stored just before it (seen as 0 with six stored: a batch of one).
func (r *rig) waitPending(task, variant string, n int) {
	r.t.Helper()
	c, err := r.js.Consumer(context.Background(), wire.TaskStream(r.spec.Name), wire.Consumer(task, variant))
	if err != nil {
		r.t.Fatal(err)
	}
	if err := testrig.WaitFor(5*time.Second, fmt.Sprintf("%d messages pending for %s/%s", n, task, variant), func() bool {
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == uint64(n)
	}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) next(timeout time.Duration) wire.ResultMessage {
	r.t.Helper()
	select {
	case rm := <-r.results:
		return rm
	case <-time.After(timeout):
		r.t.Fatal("no result message")
		return wire.ResultMessage{}
	}
}

func TestWorkerDropsExpiredItems(t *testing.T) {
	r := newRig(t)
	w := r.startWorker("w1")
	r.assign("w1", "fast")
	r.waitServing(w, "fast")
	r.publish("fast", "late-1", time.Now().Add(-time.Millisecond), nil, nil)
	rm := r.next(5 * time.Second)
	if rm.RequestID != "late-1" || len(rm.Items) != 1 {
		t.Fatalf("result %+v", rm)
	}
	if it := rm.Items[0]; it.Status != wire.ItemDropped || it.Reason != wire.DropDeadline || it.Den != 1 {
		t.Fatalf("expired item reported as %+v, want dropped for deadline", it)
	}
	if st := w.Stats(); st.Dropped != 1 || st.Items != 0 {
		t.Fatalf("stats %+v: want 1 dropped, 0 executed", st)
	}
}

// TestWorkerSwitchLosesNothing moves a worker to another variant while its queue is full: the message in hand is
// finished, the rest wait in the stream for the next replica, and every message is served exactly once.
func TestWorkerSwitchLosesNothing(t *testing.T) {
	r := newRig(t)
	w1 := r.startWorker("w1")
	r.assign("w1", "slow")
	r.waitServing(w1, "slow")
	const n = 20
	soon := time.Now().Add(time.Minute)
	for i := 0; i < n; i++ {
		r.publish("slow", fmt.Sprint("s", i), soon, nil, nil)
	}
	seen := map[string]int{}
	var mu sync.Mutex
	record := func(rm wire.ResultMessage) {
		mu.Lock()
		seen[rm.RequestID]++
		mu.Unlock()
	}
	record(r.next(5 * time.Second))
	r.assign("w1", "fast") // while the slow queue still holds most messages
	r.waitServing(w1, "fast")
	r.publish("fast", "f0", soon, nil, nil)
	for {
		rm := r.next(5 * time.Second)
		record(rm)
		if rm.RequestID == "f0" {
			break
		}
	}
	if len(seen) >= n+1 {
		t.Fatalf("the whole slow queue was served before the switch; the test proves nothing")
	}
	w2 := r.startWorker("w2")
	r.assign("w2", "slow")
	r.waitServing(w2, "slow")
	for len(seen) < n+1 {
		record(r.next(5 * time.Second))
	}
	time.Sleep(100 * time.Millisecond) // a second result for a request, if any, would be here by now
	for id, c := range seen {
		if c != 1 {
			t.Errorf("request %s served %d times", id, c)
		}
	}
	if w2.Stats().Items == 0 {
		t.Error("the second replica served nothing")
	}
}

// TestWorkerBatchesWhatIsQueued: with messages waiting, a worker takes up to its max batch at once, counting items,
// not messages: a message whose items do not fit goes back to the queue (and is counted as returned) for the next
// batch, so no batch runs longer than its max batch size takes; only a message larger than the max batch alone runs in
// several model batches.
func TestWorkerBatchesWhatIsQueued(t *testing.T) {
	for _, tc := range []struct {
		name         string
		items        []int // per message, queued before the worker starts
		want         []int // model batch sizes
		wantReturned bool
	}{
		{"pairs", []int{2, 2, 2, 2, 2, 2}, []int{4, 4, 4}, true},
		{"mixed", []int{1, 3, 2, 2, 1}, []int{4, 4, 1}, true}, // 1 takes three more: 3 fits, 2 and 2 go back
		{"singles", []int{1, 1, 1, 1, 1, 1}, []int{4, 2}, false},
		{"oversized first", []int{6, 1}, []int{4, 2, 1}, false}, // the batch is full: nothing more fetched
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			soon := time.Now().Add(time.Minute)
			total := 0
			for i, n := range tc.items {
				tm := &wire.TaskMessage{}
				for j := range n {
					tm.Items = append(tm.Items, wire.Item{ID: fmt.Sprintf("0.%d", j), Den: uint64(n)})
				}
				data, _ := msgpack.Marshal(tm)
				r.publish("slow", fmt.Sprint("r", i), soon, nil, data)
				total += n
			}
			r.waitPending("a", "slow", len(tc.items))
			var sizes []int
			var mu sync.Mutex
			w := r.startWorkerWith(Config{ID: "w1", FetchWait: 100 * time.Millisecond,
				NewExecutor: func(spec *pipeline.Spec, task, variant string, opts executor.Options) (executor.Executor, error) {
					e, err := executor.New(spec, task, variant, opts)
					return recordSizes{e, func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }}, err
				}})
			r.assignTask("w1", "a", "slow", 4)
			for items := 0; items < total; {
				items += len(r.next(5 * time.Second).Items)
			}
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(sizes) != fmt.Sprint(tc.want) {
				t.Errorf("model batches %v, want %v", sizes, tc.want)
			}
			if got := w.Stats().Returned; (got > 0) != tc.wantReturned {
				t.Errorf("%d messages returned to the queue, want some: %v", got, tc.wantReturned)
			}
		})
	}
}

// TestMessagesThatDoNotFitAreCarried: four replicas of a variant with a max batch of 4 drain a queue of messages of
// one to four items. What does not fit a batch goes back to the queue at most batching.HandBacks times, and is
// then carried to the replica's next batch: a hand-back counts a delivery, and under load the same message, handed
// back by replica after replica, reached the consumers' bound and was set aside as poison (services/up
// TestTreeEndToEnd, on a busy machine). No message is handed back from a later delivery, none is set aside, and
// every one is answered.
func TestMessagesThatDoNotFitAreCarried(t *testing.T) {
	r := newRig(t)
	// The server's advisory for each negative acknowledgement (nats-server's JSAdvisoryConsumerMsgNakPre), with
	// the delivery it ended.
	naks, err := r.nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.>")
	if err != nil {
		t.Fatal(err)
	}
	soon := time.Now().Add(time.Minute)
	const messages = 400
	total := 0
	for i := range messages {
		n := 1 + (i*7)%4
		tm := &wire.TaskMessage{}
		for j := range n {
			tm.Items = append(tm.Items, wire.Item{ID: fmt.Sprintf("0.%d", j), Den: uint64(n)})
		}
		data, _ := msgpack.Marshal(tm)
		r.publish("fast", fmt.Sprint("r", i), soon, nil, data)
		total += n
	}
	var workers []*Worker
	for i := range 4 {
		id := fmt.Sprint("w", i)
		workers = append(workers, r.startWorker(id))
		r.assignTask(id, "a", "fast", 4)
	}
	for items := 0; items < total; {
		rm := r.next(10 * time.Second)
		for _, it := range rm.Items {
			if it.Status != wire.ItemOK {
				t.Fatalf("request %s item %s: %s (%s)", rm.RequestID, it.ID, it.Status, it.Reason)
			}
		}
		items += len(rm.Items)
	}
	var returned uint64
	for _, w := range workers {
		returned += w.Stats().Returned
	}
	if err := r.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	handedBack, late := 0, 0
	for {
		m, err := naks.NextMsg(100 * time.Millisecond)
		if err != nil {
			break
		}
		var adv struct {
			Deliveries uint64 `json:"deliveries"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil {
			t.Fatal(err)
		}
		handedBack++
		if !batching.HandBack(adv.Deliveries) {
			late++
		}
	}
	t.Logf("%d messages did not fit a batch; %d were handed back", returned, handedBack)
	if late > 0 {
		t.Errorf("%d messages handed back after %d deliveries or more, want none", late, batching.HandBacks+1)
	}
	if returned == 0 {
		t.Error("every message fit: the test did not exercise messages that do not fit")
	}
}

type recordSizes struct {
	executor.Executor
	record func(int)
}

func (r recordSizes) Execute(ctx context.Context, batch []executor.Input) ([]executor.Output, error) {
	r.record(len(batch))
	return r.Executor.Execute(ctx, batch)
}

// TestWorkerFollowsMaxBatchInPlace: a new assignment that keeps the worker's variant and changes only its max batch
// (or its epoch), as a re-plan to nearly the same plan does, is followed without loading the model again, and the
// next batches are sized by it.
func TestWorkerFollowsMaxBatchInPlace(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	var loads int
	var sizes []int
	w := r.startWorkerWith(Config{ID: "w1", FetchWait: 100 * time.Millisecond,
		NewExecutor: func(spec *pipeline.Spec, task, variant string, opts executor.Options) (executor.Executor, error) {
			mu.Lock()
			loads++
			mu.Unlock()
			e, err := executor.New(spec, task, variant, opts)
			return recordSizes{e, func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }}, err
		}})
	r.assignTask("w1", "a", "slow", 1)
	r.waitServing(w, "slow")
	r.assignTask("w1", "a", "slow", 4)
	r.plan.Epoch = 2 // and an epoch of its own, as a re-plan brings
	r.assignTask("w1", "a", "slow", 4)
	soon := time.Now().Add(time.Minute)
	// The assignment reaches the worker between batches: send until a batch of more than one is seen.
	for round := 0; ; round++ {
		time.Sleep(200 * time.Millisecond) // a round's pace: the worker shows no sign of having the assignment
		for i := range 8 {
			r.publish("slow", fmt.Sprint(round, ".", i), soon, nil, nil)
		}
		for range 8 {
			r.next(5 * time.Second)
		}
		mu.Lock()
		big := slices.Max(sizes) > 1
		mu.Unlock()
		if big {
			break
		}
		if round == 5 {
			t.Fatalf("model batches %v: the max batch of 4 was not followed", sizes)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if loads != 1 {
		t.Errorf("the model was loaded %d times, want once: a max batch change reloaded it", loads)
	}
	if m := slices.Max(sizes); m > 4 {
		t.Errorf("a model batch of %d, over the max batch of 4", m)
	}
	if w.Serving() != "one:a/slow" {
		t.Errorf("serving %q", w.Serving())
	}
}
