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

// OCRModels are the model files OCRPipeline runs (for Models).
var OCRModels = []string{"paddleocr/en_PP-OCRv3_det_infer.onnx", "paddleocr/en_PP-OCRv3_rec_infer.onnx"}

// OCRPipeline is a two-task OCR pipeline on the PaddleOCR models `make models` fetches (OCRModels): a v3 detector at
// 480 pixels, its lines read by the v3 recogniser, one replica of each at batch 2; what tests serve end to end.
const OCRPipeline = `
name: ocr-e2e
slo_ms: 30000
batch_sizes: [1, 2]
tasks:
  - name: find_text
    children: [read_text]
    variants:
      - name: det
        accuracy: 0.9
        fanout: {mean: 4}
        executor: {kind: onnx, model: paddleocr/en_PP-OCRv3_det_infer.onnx, program: ocr-detect, input_size: 480}
        profile: [{batch: 1, p50_ms: 40, p95_ms: 50}, {batch: 2, p50_ms: 80, p95_ms: 90}]
  - name: read_text
    variants:
      - name: rec
        accuracy: 0.9
        executor: {kind: onnx, model: paddleocr/en_PP-OCRv3_rec_infer.onnx, program: ocr-recognize}
        profile: [{batch: 1, p50_ms: 15, p95_ms: 20}, {batch: 2, p50_ms: 25, p95_ms: 30}]
path_accuracy:
  - {path: [find_text/det, read_text/rec], accuracy: 0.75}
allocation:
  - {task: find_text, variant: det, replicas: 1, max_batch: 2}
  - {task: read_text, variant: rec, replicas: 1, max_batch: 2}
`
