package worker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/internal/onnxgen"
	"github.com/sleipnir-serving/sleipnir/internal/onnxtest"
	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestRetryDelay: 1 s, doubling, at most 30 s.
func TestRetryDelay(t *testing.T) {
	for attempts, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second,
		6: 30 * time.Second, 1000: 30 * time.Second} {
		if got := retryDelay(attempts); got != want {
			t.Errorf("after %d attempts: %v, want %v", attempts, got, want)
		}
	}
}

// onnxAndEmulated has an ONNX variant (model mlp.onnx) and an emulated one.
const onnxAndEmulated = `
name: one
slo_ms: 1000
batch_sizes: [1]
tasks:
  - name: a
    variants:
      - {name: mlp, accuracy: 0.9, executor: {kind: onnx, model: mlp.onnx}, profile: [{batch: 1, p50_ms: 5, p95_ms: 6}]}
      - {name: fast, accuracy: 0.8, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 2, p95_ms: 3}]}
allocation:
  - {task: a, variant: mlp, replicas: 1, max_batch: 1}
`

// TestWorkerSaysItCannotServe: assigned a variant whose model file is missing, the worker's heartbeat says so at
// once (variant, reason, attempts) and it tries again with backoff (at most 2 attempts in the first 2.5 s, not one per
// heartbeat); once the file is there a retry serves it; assigned elsewhere, it tries the new variant at once.
func TestWorkerSaysItCannotServe(t *testing.T) {
	onnxtest.Runtime(t)
	models := t.TempDir()
	r := newRigWith(t, onnxAndEmulated)
	w := r.startWorkerWith(Config{ID: "w1", FetchWait: 100 * time.Millisecond, RegisterEvery: 5 * time.Second,
		ModelsDir: models})
	heartbeat := func() wire.Registration {
		var reg wire.Registration
		if e, err := r.kv.Get(context.Background(), wire.WorkerKey("w1")); err == nil {
			json.Unmarshal(e.Value(), &reg)
		}
		return reg
	}
	assigned := time.Now()
	r.assign("w1", "mlp")
	// Its heartbeat period is 5 s: the failure is sent at once.
	testrig.Eventually(t, 4*time.Second, "the heartbeat says w1 cannot serve one:a/mlp", func() bool {
		f := heartbeat().Failing
		return f != nil && f.Variant == "one:a/mlp" && strings.Contains(f.Reason, "mlp.onnx") && f.Attempts >= 1
	})
	time.Sleep(time.Until(assigned.Add(2500 * time.Millisecond)))
	if f := w.Failing(); f == nil || f.Attempts > 2 {
		t.Fatalf("2.5 s after the assignment: %+v, want at most 2 attempts (at 0 and 1 s)", f)
	}
	model, err := onnxgen.MLP{In: 8, Width: 4, Depth: 1, Out: 2, Seed: 1}.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(models, "mlp.onnx"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	testrig.Eventually(t, 20*time.Second, "w1 serves one:a/mlp once its model is there", func() bool {
		return w.Serving() == "one:a/mlp" && w.Failing() == nil
	})
	if err := os.Remove(filepath.Join(models, "mlp.onnx")); err != nil {
		t.Fatal(err)
	}
	// Moved away and back, it loads the variant anew and fails again; moved to another variant, it does not wait
	// out its backoff.
	r.assign("w1", "fast")
	r.waitServing(w, "fast")
	r.assign("w1", "mlp")
	testrig.Eventually(t, 20*time.Second, "w1 fails one:a/mlp again, 4 times (the next retry 8 s later)",
		func() bool {
			f := w.Failing()
			return f != nil && f.Variant == "one:a/mlp" && f.Attempts >= 4 && w.Serving() == ""
		})
	r.assign("w1", "fast")
	if err := testrig.WaitFor(5*time.Second, "w1 serves fast", func() bool { return w.Serving() == "one:a/fast" }); err != nil {
		t.Fatalf("%v: a new assignment waited for the backoff of the failed one", err)
	}
	if f := w.Failing(); f != nil {
		t.Fatalf("serving fast, w1 still says it cannot serve %+v", f)
	}
}
