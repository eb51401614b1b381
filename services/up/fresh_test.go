package up

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
)

// TestFreshStart: a run on the state directory of an earlier one inherits its KV bucket (its plans, workers) unless
// it starts fresh, which `up` does by default.
func TestFreshStart(t *testing.T) {
	spec, err := pipeline.Load("../../examples/ocr-chain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const key = "worker.left-by-an-earlier-run"
	// run starts the system on dir, lets f see the bucket, and stops it.
	run := func(fresh bool, f func(jetstream.KeyValue)) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		started := time.Now()
		sys, err := Start(ctx, Config{DataDir: dir, Fresh: fresh, Pipelines: []*pipeline.Spec{spec},
			Planner: planner.Config{System: "static", Storage: jetstream.FileStorage}, MaxPayload: 8 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			cancel()
			// The planner may be stopped while it still sets up, which it reports as cancelled.
			if err := sys.Wait(); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("system stopped with: %v", err)
			}
		}()
		nc, err := sys.Connect("test")
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		var kv jetstream.KeyValue
		// Stopped only once this run's planner has published, so that it is not stopped halfway.
		if err := testrig.WaitFor(10*time.Second, "this run's plan", func() bool {
			if kv == nil {
				kv, _ = js.KeyValue(ctx, wire.Bucket)
			}
			if kv == nil {
				return false
			}
			e, err := kv.Get(ctx, wire.PlanKey(spec.Name))
			return err == nil && e.Created().After(started)
		}); err != nil {
			t.Fatal(err)
		}
		f(kv)
	}
	has := func(kv jetstream.KeyValue) bool {
		_, err := kv.Get(context.Background(), key)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	run(true, func(kv jetstream.KeyValue) {
		if _, err := kv.Put(context.Background(), key, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	})
	run(false, func(kv jetstream.KeyValue) {
		if !has(kv) {
			t.Error("a run with Fresh false lost the earlier run's state")
		}
	})
	run(true, func(kv jetstream.KeyValue) {
		if has(kv) {
			t.Error("a fresh run inherited the earlier run's state")
		}
	})
}
