package up

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/internal/onnxtest"
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// ocrCascade is onnxtest.OCRPipeline with read_text served by rec_v3 and, below its confidence threshold, rec_v4 (a
// static plan at the cascade's threshold). The level's figures are the test's own: what the replies' accuracy must
// show.
func ocrCascade(threshold float64) string {
	det, _, _ := strings.Cut(onnxtest.OCRPipeline, "  - name: read_text\n")
	return strings.Replace(det, "name: ocr-e2e", "name: ocr-casc", 1) + fmt.Sprintf(`  - name: read_text
    variants:
      - {name: rec_v3, accuracy: 0.9, executor: {kind: onnx, model: paddleocr/en_PP-OCRv3_rec_infer.onnx, program: ocr-recognize},
         profile: [{batch: 1, p50_ms: 15, p95_ms: 20}, {batch: 2, p50_ms: 25, p95_ms: 30}]}
      - {name: rec_v4, accuracy: 0.92, executor: {kind: onnx, model: paddleocr/en_PP-OCRv4_rec.onnx, program: ocr-recognize},
         profile: [{batch: 1, p50_ms: 20, p95_ms: 25}, {batch: 2, p50_ms: 35, p95_ms: 40}]}
    cascade:
      variants: [rec_v3, rec_v4]
      levels: [{threshold: %[1]v, escalation: 0.3, accuracy: 0.95, next_accuracy: 0.8}]
      threshold: %[1]v
path_accuracy:
  - {path: [find_text/det, read_text/rec_v3], accuracy: 0.75}
  - {path: [find_text/det, read_text/rec_v4], accuracy: 0.8}
allocation:
  - {task: find_text, variant: det, replicas: 1, max_batch: 2}
  - {task: read_text, variant: rec_v3, replicas: 1, max_batch: 2}
  - {task: read_text, variant: rec_v4, replicas: 1, max_batch: 2}
`, threshold)
}

// ocrCascadeThreshold sends on some of the rendered lines and keeps others (rec_v3's confidence on them).
const ocrCascadeThreshold = 0.97

// TestOCRCascadeLive: on the real models, rec_v3's confidence in each line decides: a line it keeps carries a
// confidence at or above the threshold, the others are read by rec_v4 (their path ends rec_v3, rec_v4), some of
// each; every reply's accuracy is the mean of its lines' level accuracies.
func TestOCRCascadeLive(t *testing.T) {
	models := onnxtest.Models(t, append(onnxtest.OCRModels, "paddleocr/en_PP-OCRv4_rec.onnx")...)
	sys, spec := startSpecSystem(t, ocrCascade(ocrCascadeThreshold),
		Config{Workers: 3, Worker: worker.Config{ModelsDir: models}})
	c := newClient(t, sys)
	fonts, _ := ocr.LoadFonts("")
	imgs, _, err := ocr.Generate(6, 21, fonts)
	if err != nil {
		t.Fatal(err)
	}
	subjects := sendImages(t, c, spec.Name, imgs)
	replies := c.Wait(t, subjects, 3*time.Minute)
	kept := []string{"find_text/det", "read_text/rec_v3"}
	sent := append(slices.Clone(kept), "read_text/rec_v4")
	keptAcc, sentAcc := 0.75*0.95/0.9, 0.75*0.8/0.9
	var nKept, nSent int
	for i, s := range subjects {
		rep := decodeReply(t, replies[s][0])
		if rep.Status != wire.StatusOK {
			t.Fatalf("request %d: %s %s", i, rep.Status, rep.Error)
		}
		var sum, weight float64
		for _, r := range rep.Results {
			w := 1 / float64(r.Den)
			switch {
			case slices.Equal(r.Path, kept):
				nKept++
				sum += w * keptAcc
				if conf := confidenceOf(r.Outputs); conf < ocrCascadeThreshold {
					t.Errorf("request %d: line %s kept by rec_v3 at confidence %v", i, r.ID, conf)
				}
			case slices.Equal(r.Path, sent):
				nSent++
				sum += w * sentAcc
			default:
				t.Fatalf("request %d: leaf path %v", i, r.Path)
			}
			weight += w
		}
		if weight > 0 && math.Abs(rep.Accuracy-sum/weight) > 1e-9 {
			t.Errorf("request %d: accuracy %v, its lines' levels give %v", i, rep.Accuracy, sum/weight)
		}
	}
	t.Logf("%d lines kept by rec_v3, %d sent on to rec_v4", nKept, nSent)
	if nKept == 0 || nSent == 0 {
		t.Errorf("%d lines kept by rec_v3, %d sent on to rec_v4: want some of each", nKept, nSent)
	}
}

// confidenceOf is the recogniser's confidence among a line's outputs (-1 without one).
func confidenceOf(ts []wire.Tensor) float64 {
	for _, t := range ts {
		if v, err := t.FP32(); t.Name == ocr.TensorConfidence && err == nil && len(v) == 1 {
			return float64(v[0])
		}
	}
	return -1
}
