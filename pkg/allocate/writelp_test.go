package allocate

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// TestWriteLP: the model WriteLP writes, solved by CBC, has the system accuracy Solve finds at an accuracy-scaling
// demand; a priced model has no whole form to write; bad input is refused as Solve refuses it.
func TestWriteLP(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Spec: spec, Demand: 700, Servers: 20}
	res, err := Solve(in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != ModeAccuracy || !res.Optimal {
		t.Fatalf("mode %s, optimal %v: want a proven accuracy-scaling plan", res.Mode, res.Optimal)
	}
	path := filepath.Join(t.TempDir(), "traffic.lp")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteLP(f, in); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	st, obj, err := milp.SolveCBCFile(context.Background(), path)
	if errors.Is(err, milp.ErrNoCBC) {
		t.Skip("CBC is needed to solve the written model: ", err, " (make deps installs it)")
	}
	if err != nil {
		t.Fatal(err)
	}
	if st != milp.Optimal || math.Abs(obj-res.SystemAccuracy) > 1e-6 {
		t.Errorf("CBC on the written model: %s %.8f; Solve: system accuracy %.8f", st, obj, res.SystemAccuracy)
	}

	flowColumnLimit = 10
	defer func() { flowColumnLimit = MaxFlowColumns }()
	if err := WriteLP(io.Discard, in); !errors.Is(err, ErrModelTooLarge) {
		t.Errorf("a priced model: %v, want ErrModelTooLarge", err)
	}
	if err := WriteLP(io.Discard, Input{Spec: spec, Demand: 700}); !errors.Is(err, ErrNoServers) {
		t.Errorf("no servers: %v, want ErrNoServers", err)
	}
}
