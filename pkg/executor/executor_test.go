package executor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

type stub struct{ variant string }

func (stub) Execute(context.Context, []executor.Input) ([]executor.Output, error) { return nil, nil }
func (stub) Close() error                                                         { return nil }

// New builds a variant with the constructor registered for its kind, and refuses, naming it, a kind this program
// did not register (this test binary imports no kind package until it registers one).
func TestNewBuildsTheRegisteredKind(t *testing.T) {
	spec, err := pipeline.Parse([]byte(`
name: one
slo_ms: 100
batch_sizes: [1]
tasks:
  - name: t
    variants:
      - {name: v, accuracy: 1, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 1, p95_ms: 1}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := executor.New(spec, "t", "v", executor.Options{}); err == nil || !strings.Contains(err.Error(), `"emulated" is not supported`) {
		t.Fatalf("an unregistered kind: %v, want it refused by name", err)
	}
	executor.Register(pipeline.ExecutorEmulated, func(_ *pipeline.Spec, task string, v *pipeline.Variant,
		_ executor.Options) (executor.Executor, error) {
		return stub{variant: task + "/" + v.Name}, nil
	})
	e, err := executor.New(spec, "t", "v", executor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := e.(stub); !ok || s.variant != "t/v" {
		t.Errorf("New built %#v, want the registered constructor's executor of t/v", e)
	}
	if _, err := executor.New(spec, "t", "nope", executor.Options{}); err == nil {
		t.Error("an unknown variant was accepted")
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a kind twice did not panic")
		}
	}()
	executor.Register(pipeline.ExecutorEmulated, nil)
}
