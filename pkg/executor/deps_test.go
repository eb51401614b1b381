package executor_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const (
	module      = "github.com/sleipnir-serving/sleipnir"
	onnxRuntime = "github.com/yalue/onnxruntime_go"
)

// deps lists the packages pkg links (go list -deps: what its binary would hold, tests left out).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v %s", pkg, err, msg)
	}
	return strings.Fields(string(out))
}

// The simulator and the load generator run without models, so they do not link ONNX Runtime (a cgo library that
// needs its shared library at run time): they reach the emulated executor and the OCR tensor names without the onnx
// kind. The worker, which runs every kind, does link it, which shows the listing sees the dependency at all.
func TestOnlyWhatRunsModelsLinksONNXRuntime(t *testing.T) {
	for _, pkg := range []string{"pkg/sim", "cmd/loadgen"} {
		if d := deps(t, module+"/"+pkg); slices.Contains(d, onnxRuntime) {
			t.Errorf("%s links %s", pkg, onnxRuntime)
		}
	}
	if d := deps(t, module+"/services/worker"); !slices.Contains(d, onnxRuntime) {
		t.Errorf("services/worker does not link %s: it cannot run onnx variants", onnxRuntime)
	}
}
