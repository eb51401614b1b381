package profiler

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/onnxtest"
	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/executor/onnxexec"
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
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
	_, loaded, _ := profileAndLoad(t, cascadeSpec, models, 4, 11, nil)
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

// TestProfileCascadePathLevels: the profiler measures the cascade's levels on the detector's items too, and what
// they say its path serves, (1-escalation)*accuracy + escalation*next_accuracy, is what reading the detector's
// crops as the cascade does serves (rec_v3 on every line found, rec_v4 on those rec_v3 is less sure of), scored
// against the true lines; at threshold 0 it is the path through rec_v3 alone.
func TestProfileCascadePathLevels(t *testing.T) {
	models := onnxtest.Models(t, "paddleocr/en_PP-OCRv3_det_infer.onnx", "paddleocr/en_PP-OCRv3_rec_infer.onnx",
		"paddleocr/en_PP-OCRv4_rec.onnx")
	// det_v3_480 finds most lines, and rec_v3 is unsure of some of them at these thresholds.
	specYAML := strings.ReplaceAll(strings.Replace(cascadeSpec, "thresholds: [0, 0.5, 0.9, 1]",
		"thresholds: [0, 0.95, 0.98]", 1), "320", "480")
	_, loaded, set := profileAndLoad(t, specYAML, models, 6, 11, nil)
	c := loaded.Task("read_text").Cascade
	det := []string{"find_text/det_v3_480"}
	for _, th := range []float64{0, 0.95, 0.98} {
		l, ok := c.PathLevel(det, th)
		if !ok {
			t.Fatalf("no levels measured on %v's items: %+v", det, c.Paths)
		}
		got := (1-l.Escalation)*l.Accuracy + l.Escalation*l.NextAccuracy
		want := served(t, loaded, models, set, th)
		t.Logf("threshold %v: %+v, serves %.4f", th, l, want)
		if math.Abs(got-want) > 1e-3 {
			t.Errorf("threshold %v: the level %+v says %.4f, reading the detector's crops serves %.4f", th, l, got, want)
		}
	}
	if l, _ := c.PathLevel(det, 0); math.Abs(l.Accuracy-loaded.PathAccuracyOf(append(det, "read_text/rec_v3"))) > 1e-4 {
		t.Errorf("threshold 0: %+v, want the path through rec_v3's accuracy", l)
	}
}

// served is the share of set's true lines that det_v3_480, then the cascade at threshold th, reads exactly.
func served(t *testing.T, s *pipeline.Spec, models string, set *ocr.Set, th float64) float64 {
	t.Helper()
	exec := func(task, variant string, in []executor.Input) []executor.Output {
		e, err := onnxexec.New(s, task, s.Variant(task, variant), models)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		out, err := e.Execute(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	exact, lines := 0, 0
	for i, d := range set.Documents {
		b, err := set.ImageBytes(i)
		if err != nil {
			t.Fatal(err)
		}
		found := exec("find_text", "det_v3_480", []executor.Input{{Tensors: []wire.Tensor{wire.NewBytes(ocr.TensorImage, [][]byte{b})}}})
		var crops []executor.Input
		for _, ts := range found[0].Children["read_text"] {
			crops = append(crops, executor.Input{Tensors: ts})
		}
		var reads []ocr.Read
		if len(crops) > 0 {
			first, next := exec("read_text", "rec_v3", crops), exec("read_text", "rec_v4", crops)
			for k, o := range first {
				if o.Confidence < th {
					o = next[k]
				}
				r, _ := ocr.ReadOf(o.Tensors)
				reads = append(reads, r)
			}
		}
		sc := ocr.ScorePage(reads, d.Lines)
		exact, lines = exact+sc.ExactLines, lines+sc.Lines
	}
	return float64(exact) / float64(lines)
}
