package profiler

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/onnxtest"
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

const spec = `
name: ocr-small
slo_ms: 3000
batch_sizes: [1, 2]
profiles: small.profile.yaml
tasks:
  - name: find_text
    children: [read_text]
    variants:
      - {name: det_v3_320, executor: {kind: onnx, model: paddleocr/en_PP-OCRv3_det_infer.onnx, program: ocr-detect, input_size: 320}}
  - name: read_text
    variants:
      - {name: rec_v3, executor: {kind: onnx, model: paddleocr/en_PP-OCRv3_rec_infer.onnx, program: ocr-recognize}}
`

// The profiler measures a small OCR pipeline with the real models on a few rendered images, and what it writes is
// a profile file that the spec then loads with.
func TestProfileSmallOCRPipeline(t *testing.T) {
	models := onnxtest.Models(t, "paddleocr/en_PP-OCRv3_det_infer.onnx", "paddleocr/en_PP-OCRv3_rec_infer.onnx")
	steps := 0
	res, loaded, _ := profileAndLoad(t, spec, models, 3, 7, func(done, _ int, _ string) { steps = done })
	if steps != 2*(1+2) {
		t.Errorf("progress reached step %d, want 6", steps)
	}
	det := loaded.Variant("find_text", "det_v3_320")
	if det.Fanout.Mean <= 0 || det.Accuracy <= 0 || det.Accuracy > 1 || det.SwapMs <= 0 || len(det.Profile) != 2 {
		t.Errorf("detector profile %+v (fanout %+v)", det, det.Fanout)
	}
	if p := det.Profile; p[0].P50Ms <= 0 || p[0].P95Ms < p[0].P50Ms {
		t.Errorf("detector latency %+v", p)
	}
	if len(loaded.PathAccuracy) != 1 || loaded.PathAccuracy[0].Accuracy <= 0 {
		t.Errorf("path accuracy %+v", loaded.PathAccuracy)
	}
	var table bytes.Buffer
	res.WriteTable(&table)
	for _, want := range []string{"find_text/det_v3_320", "read_text/rec_v3", "det_v3_320 -> rec_v3"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

// profileAndLoad profiles specYAML (written to a file of its own) with the models in models on a rendered set of
// images images (seed), writes the profile file the spec names, and loads the spec with it.
func profileAndLoad(t *testing.T, specYAML, models string, images int, seed uint64,
	progress func(done, total int, what string)) (*Result, *pipeline.Spec, *ocr.Set) {
	t.Helper()
	dir := t.TempDir()
	specPath := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(specPath, []byte(specYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := pipeline.LoadForProfiling(specPath)
	if err != nil {
		t.Fatal(err)
	}
	fonts, _ := ocr.LoadFonts("")
	set, err := ocr.WriteSet(filepath.Join(dir, "data"), images, seed, fonts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{Spec: s, Set: set, ModelsDir: models, Repetitions: 1,
		Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	if err := pipeline.WriteProfileFile(filepath.Join(dir, s.Profiles), &res.File, Header("test")); err != nil {
		t.Fatal(err)
	}
	loaded, err := pipeline.Load(specPath)
	if err != nil {
		t.Fatalf("the spec does not load with its new profile: %v", err)
	}
	return res, loaded, set
}

func TestProfileRejectsOtherPipelines(t *testing.T) {
	s, err := pipeline.Parse([]byte(`
name: one
slo_ms: 100
tasks:
  - name: a
    variants:
      - {name: x, accuracy: 1, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 1, p95_ms: 1}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Config{Spec: s}); err == nil || !strings.Contains(err.Error(), "ocr-detect then ocr-recognize") {
		t.Errorf("error %v, want it to say what the profiler measures", err)
	}
}

// TestMonotone: a measured latency below a smaller batch's is raised to it, quantile by quantile, so that the
// profile loads; a profile that already grows is left as it is.
func TestMonotone(t *testing.T) {
	type pts = []pipeline.ProfilePoint
	pt := func(batch int, p50, p95, p99 float64) pipeline.ProfilePoint {
		return pipeline.ProfilePoint{Batch: batch, P50Ms: p50, P95Ms: p95, P99Ms: p99}
	}
	for _, c := range []struct {
		name     string
		in, want pts
	}{
		{name: "growing",
			in:   pts{pt(1, 10, 12, 13), pt(2, 15, 18, 20)},
			want: pts{pt(1, 10, 12, 13), pt(2, 15, 18, 20)}},
		{name: "noise at batch 2",
			in:   pts{pt(1, 59.89, 70, 80), pt(2, 55.5, 66, 90), pt(4, 58, 75, 85)},
			want: pts{pt(1, 59.89, 70, 80), pt(2, 59.89, 70, 90), pt(4, 59.89, 75, 90)}},
		{name: "no p99",
			in:   pts{pt(1, 10, 12, 0), pt(2, 9, 11, 0)},
			want: pts{pt(1, 10, 12, 0), pt(2, 10, 12, 0)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := monotone(append(pts(nil), c.in...))
			if len(got) != len(c.want) {
				t.Fatalf("%d points, want %d", len(got), len(c.want))
			}
			for k := range got {
				if got[k] != c.want[k] {
					t.Errorf("point %d: %+v, want %+v", k, got[k], c.want[k])
				}
			}
		})
	}
}
