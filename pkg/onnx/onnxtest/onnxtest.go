// Package onnxtest gives tests the ONNX Runtime: it loads the library `make models` fetched (or $SLEIPNIR_MODELS,
// $SLEIPNIR_ONNXRUNTIME_LIB) and skips the test, saying how to get it, when it is absent.
package onnxtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/onnx"
)

// ModelsDir is the models directory tests use: $SLEIPNIR_MODELS, or models/ at the root of the repository (tests
// run in their package's directory, so a relative default would not do).
func ModelsDir(t testing.TB) string {
	if d := os.Getenv(onnx.EnvModels); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, onnx.DefaultModelsDir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("onnxtest: no go.mod above the test's directory")
		}
		dir = parent
	}
}

// Runtime initialises ONNX Runtime for the test and returns the models directory, or skips the test when the
// library is absent.
func Runtime(t testing.TB) string {
	t.Helper()
	dir := ModelsDir(t)
	if err := onnx.Init(onnx.LibraryPath(dir)); err != nil {
		t.Skipf("%v (make test fetches it first)", err)
	}
	return dir
}

// Models returns the models directory after checking that the fetched model files named (relative to it) are
// there, or skips the test when one is absent.
func Models(t testing.TB, rel ...string) string {
	t.Helper()
	dir := Runtime(t)
	for _, r := range rel {
		if p := filepath.Join(dir, r); !exists(p) {
			t.Skipf("model %s not found: run `make models` (or set %s)", p, onnx.EnvModels)
		}
	}
	return dir
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
