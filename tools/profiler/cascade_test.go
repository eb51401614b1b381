package profiler

import (
	"math"
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/onnxtest"
)

// cascadeSpec is the small pipeline with rec_v4 beside rec_v3, and read_text declared the cascade of the two.
var cascadeSpec = spec + `      - {name: rec_v4, executor: {kind: onnx, model: paddleocr/en_PP-OCRv4_rec.onnx, program: ocr-recognize}}
    cascade: {variants: [rec_v3, rec_v4], thresholds: [0, 0.5, 0.9, 1]}
`

// TestProfileCascadeLevels: on real recognisers and rendered lines, the profiler measures the cascade's levels from
// rec_v3's confidence per line: none sent on at threshold 0, most at 1, few at 0.5 (the recogniser is sure of
// most clean lines), more as the threshold rises; at 0 the kept lines' accuracy is rec_v3's own; the spec loads them.
func TestProfileCascadeLevels(t *testing.T) {
	models := onnxtest.Models(t, "paddleocr/en_PP-OCRv3_det_infer.onnx", "paddleocr/en_PP-OCRv3_rec_infer.onnx",
		"paddleocr/en_PP-OCRv4_rec.onnx")
	_, loaded := profileAndLoad(t, cascadeSpec, models, 4, 11, nil)
	ls := loaded.Task("read_text").Cascade.Levels
	if len(ls) != 4 {
		t.Fatalf("levels %+v, want 4", ls)
	}
	if ls[0].Escalation != 0 || math.Abs(ls[0].Accuracy-loaded.Variant("read_text", "rec_v3").Accuracy) > 1e-4 {
		t.Errorf("threshold 0: %+v, want nothing sent on and rec_v3's accuracy", ls[0])
	}
	if ls[3].Escalation < max(0.5, ls[2].Escalation) || ls[1].Escalation >= 0.5 || ls[2].Escalation < ls[1].Escalation {
		t.Errorf("levels %+v: want most sent on at 1, under half at 0.5, more at 0.9", ls)
	}
}
