package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/natsproc"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestWorkerRefusesBogusAssignments: an assignment the worker cannot follow (a variant the pipeline lacks, one the
// plan does not host, batch 0, another worker's, not JSON, a stale epoch) is refused and counted, and the worker
// keeps serving what it served; one ahead of the plan it knows waits for that plan; a good one is followed.
func TestWorkerRefusesBogusAssignments(t *testing.T) {
	r := newRig(t)
	w := r.startWorker("w1")
	r.assign("w1", "fast")
	r.waitServing(w, "fast")
	ctx := context.Background()
	put := func(v string) {
		t.Helper()
		if _, err := r.kv.Put(ctx, wire.AssignKey("w1"), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(edit func(a *plan.Assignment)) string {
		a := plan.Assignment{Worker: "w1", Pipeline: r.spec.Name, Task: "a", Variant: "slow", MaxBatch: 1,
			Epoch: r.plan.Epoch}
		edit(&a)
		data, _ := json.Marshal(a)
		return string(data)
	}
	bogus := []string{
		mk(func(a *plan.Assignment) { a.Variant = "nope" }),
		mk(func(a *plan.Assignment) { a.MaxBatch = 0 }),
		mk(func(a *plan.Assignment) { a.Worker = "w2" }),
		mk(func(a *plan.Assignment) { a.Pipeline = "other" }),
		`{"worker": 5}`,
	}
	for i, v := range bogus {
		put(v)
		for end := time.Now().Add(5 * time.Second); w.Complaints()[ComplainAssignment] < uint64(i+1); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("the bogus assignment %s was not refused", v)
			}
		}
		if got := w.Serving(); got != r.spec.Name+":a/fast" {
			t.Fatalf("after the bogus assignment %s the worker serves %q, want a/fast still", v, got)
		}
	}
	// Ahead of the plan (epoch 2 while the plan is 1): not followed until the plan of epoch 2 arrives.
	put(mk(func(a *plan.Assignment) { a.Epoch = 2 }))
	time.Sleep(300 * time.Millisecond)
	if got := w.Serving(); got != r.spec.Name+":a/fast" {
		t.Fatalf("an assignment ahead of the plan was followed: serving %q", got)
	}
	r.plan.Epoch = 2
	data, _ := json.Marshal(r.plan)
	if _, err := r.kv.Put(ctx, wire.PlanKey(r.spec.Name), data); err != nil {
		t.Fatal(err)
	}
	r.waitServing(w, "slow")
	// Stale (epoch 1 under the plan of epoch 2): refused.
	put(mk(func(a *plan.Assignment) { a.Variant, a.Epoch = "fast", 1 }))
	time.Sleep(300 * time.Millisecond)
	if got := w.Serving(); got != r.spec.Name+":a/slow" {
		t.Fatalf("a stale assignment was followed: serving %q", got)
	}
}

// TestWorkerRegistersAtOnceAfterReconnecting: after the NATS server comes back, the worker refreshes its
// registration at once, not a registration period later, so the planner does not take it for gone.
func TestWorkerRegistersAtOnceAfterReconnecting(t *testing.T) {
	if _, err := natsproc.Binary(); err != nil {
		t.Skip(err)
	}
	srv, err := natsproc.Start(natsproc.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	// The planner owns the bucket; here the test makes it, as the planner would, for the worker to bind.
	pnc, err := bus.Connect(srv.URL(), "planner")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pnc.Close)
	pjs, _ := jetstream.New(pnc)
	if _, err := bus.OpenBucket(t.Context(), pjs, jetstream.FileStorage); err != nil {
		t.Fatal(err)
	}
	nc, err := bus.Connect(srv.URL(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(nc, Config{ID: "w1", RegisterEvery: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; nc.Close() })

	rnc, err := bus.Connect(srv.URL(), "reader")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rnc.Close)
	js, _ := jetstream.New(rnc)
	heartbeat := func() int64 {
		kv, err := js.KeyValue(ctx, wire.Bucket)
		if err != nil {
			return 0
		}
		e, err := kv.Get(ctx, wire.WorkerKey("w1"))
		if err != nil {
			return 0
		}
		var reg wire.Registration
		json.Unmarshal(e.Value(), &reg)
		return reg.Heartbeat
	}
	waitUntil := func(what string, within time.Duration, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("not within %v: %s", within, what)
			}
		}
	}
	waitUntil("the first registration", 5*time.Second, func() bool { return heartbeat() == 1 })
	srv.Kill()
	time.Sleep(time.Second)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitUntil("a registration after the restart", 5*time.Second, func() bool { return heartbeat() >= 2 })
}
