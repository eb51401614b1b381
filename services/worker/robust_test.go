package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
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
		testrig.Eventually(t, 5*time.Second, "the bogus assignment "+v+" is refused", func() bool {
			return w.Complaints()[ComplainAssignment] >= uint64(i+1)
		})
		if got := w.Serving(); got != r.spec.Name+":a/fast" {
			t.Fatalf("after the bogus assignment %s the worker serves %q, want a/fast still", v, got)
		}
	}
	// Ahead of the plan (epoch 2 while the plan is 1): not followed until the plan of epoch 2 arrives.
	put(mk(func(a *plan.Assignment) { a.Epoch = 2 }))
	testrig.Consistently(t, 300*time.Millisecond, "serving a/fast under an assignment ahead of the plan", func() bool {
		return w.Serving() == r.spec.Name+":a/fast"
	})
	r.plan.Epoch = 2
	data, _ := json.Marshal(r.plan)
	if _, err := r.kv.Put(ctx, wire.PlanKey(r.spec.Name), data); err != nil {
		t.Fatal(err)
	}
	r.waitServing(w, "slow")
	// Stale (epoch 1 under the plan of epoch 2): refused.
	put(mk(func(a *plan.Assignment) { a.Variant, a.Epoch = "fast", 1 }))
	testrig.Consistently(t, 300*time.Millisecond, "serving a/slow under a stale assignment", func() bool {
		return w.Serving() == r.spec.Name+":a/slow"
	})
}

// TestWorkerRegistersAtOnceAfterReconnecting: after the NATS server comes back, the worker refreshes its
// registration at once, not a registration period later, so the planner does not take it for gone.
func TestWorkerRegistersAtOnceAfterReconnecting(t *testing.T) {
	if _, err := natsproc.Binary(); err != nil {
		t.Skip(err)
	}
	// A real server, which the test can kill and restart on the same store.
	srv, err := natsproc.Start(natsproc.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	// The planner owns the bucket; here the test makes it, with the planner's function, for the worker to bind.
	pjs := testrig.JetStream(t, testrig.Connect(t, srv.URL(), "planner"))
	if _, err := bus.OpenBucket(t.Context(), pjs, jetstream.FileStorage, 0); err != nil {
		t.Fatal(err)
	}
	w, err := New(testrig.Connect(t, srv.URL(), "w1"), Config{ID: "w1", RegisterEvery: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "worker w1", w.Run)

	js := testrig.JetStream(t, testrig.Connect(t, srv.URL(), "reader"))
	ctx := t.Context()
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
	testrig.Eventually(t, 5*time.Second, "the first registration", func() bool { return heartbeat() == 1 })
	srv.Kill()
	time.Sleep(time.Second) // the outage
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testrig.Eventually(t, 5*time.Second, "a registration after the restart", func() bool { return heartbeat() >= 2 })
}
