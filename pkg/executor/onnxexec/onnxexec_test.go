package onnxexec

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/sleipnir-serving/sleipnir/internal/onnxgen"
	"github.com/sleipnir-serving/sleipnir/internal/onnxtest"
	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// mlpSpec writes a generated MLP into a models directory and returns a one-task pipeline serving it.
func mlpSpec(t testing.TB, m onnxgen.MLP) (*pipeline.Spec, string) {
	t.Helper()
	onnxtest.Runtime(t)
	dir := t.TempDir()
	b, err := m.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mlp.onnx"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := pipeline.Parse([]byte(`
name: mlp
slo_ms: 100
batch_sizes: [1, 8]
tasks:
  - name: score
    variants:
      - name: mlp
        accuracy: 1
        executor: {kind: onnx, model: mlp.onnx}
        profile: [{batch: 1, p50_ms: 1, p95_ms: 1}, {batch: 8, p50_ms: 2, p95_ms: 2}]
`))
	if err != nil {
		t.Fatal(err)
	}
	return spec, dir
}

// The tensor program stacks items into one batch and splits the outputs back: each item gets what the model gives
// for it alone; an item of the wrong shape fails alone.
func TestONNXTensorProgram(t *testing.T) {
	m := onnxgen.MLP{In: 8, Width: 16, Depth: 2, Out: 3, Seed: 5}
	spec, dir := mlpSpec(t, m)
	e, err := executor.New(spec, "score", "mlp", executor.Options{ModelsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var batch []executor.Input
	for i := 0; i < 4; i++ {
		x := make([]float32, m.In)
		for j := range x {
			x[j] = float32(math.Cos(float64(i*m.In + j)))
		}
		batch = append(batch, executor.Input{RequestID: "r", ItemID: fmt.Sprint(i), Tensors: []wire.Tensor{wire.NewFP32("x", []int64{int64(m.In)}, x)}})
	}
	batch = append(batch, executor.Input{RequestID: "r", ItemID: "bad", Tensors: []wire.Tensor{wire.NewFP32("x", []int64{3}, []float32{1, 2, 3})}})
	outs, err := e.Execute(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != len(batch) {
		t.Fatalf("%d outputs for %d inputs", len(outs), len(batch))
	}
	for i, o := range outs[:4] {
		x, _ := batch[i].Tensors[0].FP32()
		want := m.Forward(x)
		if o.Err != nil || len(o.Tensors) != 1 {
			t.Fatalf("item %d: %+v", i, o)
		}
		got, _ := o.Tensors[0].FP32()
		for j := range want {
			if math.Abs(float64(got[j]-want[j])) > 1e-4*(1+math.Abs(float64(want[j]))) {
				t.Errorf("item %d output %d: %g, want %g", i, j, got[j], want[j])
			}
		}
	}
	if outs[4].Err == nil || !strings.Contains(outs[4].Err.Error(), "shape") {
		t.Errorf("the wrongly shaped item: err %v, want a shape error", outs[4].Err)
	}
}

// ocrSpec is a two-task OCR pipeline on the fetched PaddleOCR models.
func ocrSpec(t testing.TB) (*pipeline.Spec, string) {
	t.Helper()
	models := onnxtest.Models(t, "paddleocr/en_PP-OCRv3_det_infer.onnx", "paddleocr/en_PP-OCRv3_rec_infer.onnx")
	spec, err := pipeline.Parse([]byte(`
name: ocr-test
slo_ms: 5000
batch_sizes: [1]
tasks:
  - name: find_text
    children: [read_text]
    variants:
      - {name: det, accuracy: 1, fanout: {mean: 4}, executor: {kind: onnx, model: paddleocr/en_PP-OCRv3_det_infer.onnx, program: ocr-detect, input_size: 640}, profile: [{batch: 1, p50_ms: 50, p95_ms: 60}]}
  - name: read_text
    variants:
      - {name: rec, accuracy: 1, executor: {kind: onnx, model: paddleocr/en_PP-OCRv3_rec_infer.onnx, program: ocr-recognize}, profile: [{batch: 1, p50_ms: 20, p95_ms: 25}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	return spec, models
}

// The OCR programs with the real PaddleOCR models read rendered documents: the detector finds the lines (one
// sub-request each, with its crop and box), the recogniser reads them, and most lines come back exactly.
func TestONNXOCRReadsRenderedLines(t *testing.T) {
	spec, models := ocrSpec(t)
	det, err := executor.New(spec, "find_text", "det", executor.Options{ModelsDir: models})
	if err != nil {
		t.Fatal(err)
	}
	defer det.Close()
	rec, err := executor.New(spec, "read_text", "rec", executor.Options{ModelsDir: models})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	fonts, _ := ocr.LoadFonts("")
	imgs, docs, err := ocr.Generate(4, 11, fonts)
	if err != nil {
		t.Fatal(err)
	}
	var batch []executor.Input
	for i, img := range imgs {
		var buf bytes.Buffer
		png.Encode(&buf, img)
		batch = append(batch, executor.Input{RequestID: fmt.Sprint(i), ItemID: "0", Tensors: []wire.Tensor{wire.NewBytes(ocr.TensorImage, [][]byte{buf.Bytes()})}})
	}
	batch = append(batch, executor.Input{RequestID: "bad", ItemID: "0", Tensors: []wire.Tensor{wire.NewBytes(ocr.TensorImage, [][]byte{[]byte("not a png")})}})
	outs, err := det.Execute(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if outs[4].Err == nil {
		t.Error("an undecodable image did not fail on its own")
	}
	exact, lines := 0, 0
	for i, o := range outs[:4] {
		if o.Err != nil {
			t.Fatalf("image %d: %v", i, o.Err)
		}
		var in []executor.Input
		for k, ts := range o.Children["read_text"] {
			in = append(in, executor.Input{RequestID: fmt.Sprint(i), ItemID: fmt.Sprint(k), Tensors: ts})
		}
		if boxes := o.Tensors[0]; boxes.Name != ocr.TensorBoxes || boxes.Shape[0] != int64(len(in)) {
			t.Errorf("image %d: boxes tensor %v for %d lines", i, boxes.Shape, len(in))
		}
		var reads []ocr.Read
		if len(in) > 0 {
			routs, err := rec.Execute(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			for k, ro := range routs {
				r, ok := ocr.ReadOf(ro.Tensors)
				if !ok || r.Box == (ocr.Box{}) {
					t.Errorf("image %d line %d: no text, or the box did not come through the recogniser: %+v", i, k, ro.Tensors)
				}
				reads = append(reads, r)
			}
		}
		s := ocr.ScorePage(reads, docs[i].Lines)
		exact += s.ExactLines
		lines += s.Lines
		t.Logf("image %d: %d of %d lines read exactly, page character accuracy %.3f", i, s.ExactLines, s.Lines, s.CharAccuracy)
	}
	if exact*2 < lines {
		t.Errorf("%d of %d lines read exactly, want at least half", exact, lines)
	}
}

// BenchmarkONNX measures the executor at batch 1 and batch 8 on generated models, and the same inference as a bare
// onnxruntime_go call: the difference is Sleipnir's overhead (decoding each item's tensor, stacking, splitting and
// encoding the outputs). The two run alternately in one loop, each session warmed up the same way (batch 1, then the
// batch measured), so drift of a shared machine hits both alike; the medians of the per-run times are reported, and
// overhead-% is the executor's median over the bare call's.
func BenchmarkONNX(b *testing.B) {
	for _, m := range []onnxgen.MLP{{In: 256, Width: 512, Depth: 3, Out: 16, Seed: 1}, {In: 1024, Width: 1024, Depth: 4, Out: 64, Seed: 2}} {
		spec, dir := mlpSpec(b, m)
		for _, n := range []int{1, 8} {
			b.Run(fmt.Sprintf("mlp%dx%d/batch%d", m.Width, m.Depth, n), func(b *testing.B) {
				x := make([]float32, n*m.In)
				for i := range x {
					x[i] = float32(i%7) / 7
				}
				e, err := executor.New(spec, "score", "mlp", executor.Options{ModelsDir: dir})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				batch := make([]executor.Input, n)
				for i := range batch {
					batch[i] = executor.Input{Tensors: []wire.Tensor{wire.NewFP32("x", []int64{int64(m.In)}, x[i*m.In:(i+1)*m.In])}}
				}
				execute := func() {
					if _, err := e.Execute(context.Background(), batch); err != nil {
						b.Fatal(err)
					}
				}
				bare := bareMLP(b, filepath.Join(dir, "mlp.onnx"), m, x, n)
				execute()
				bare()
				var exec, base []time.Duration
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					first, second, d1, d2 := execute, bare, &exec, &base
					if i%2 == 1 {
						first, second, d1, d2 = bare, execute, &base, &exec
					}
					t0 := time.Now()
					first()
					t1 := time.Now()
					second()
					*d1, *d2 = append(*d1, t1.Sub(t0)), append(*d2, time.Since(t1))
				}
				me, mb := median(exec), median(base)
				b.ReportMetric(float64(me.Nanoseconds())/1e3, "executor-us")
				b.ReportMetric(float64(mb.Nanoseconds())/1e3, "bare-us")
				b.ReportMetric(100*(float64(me)/float64(mb)-1), "overhead-%")
			})
		}
	}
}

// bareMLP is the bare onnxruntime_go call of BenchmarkONNX: a session with the executor's options, the input tensor
// filled once, the output tensor reused, warmed up with batch 1 as the executor is.
func bareMLP(b *testing.B, path string, m onnxgen.MLP, x []float32, n int) func() {
	so, err := ort.NewSessionOptions()
	if err != nil {
		b.Fatal(err)
	}
	defer so.Destroy()
	so.SetIntraOpNumThreads(1)
	so.SetInterOpNumThreads(1)
	s, err := ort.NewDynamicAdvancedSession(path, []string{"x"}, []string{"y"}, so)
	if err != nil {
		b.Fatal(err)
	}
	warm, _ := ort.NewTensor(ort.NewShape(1, int64(m.In)), make([]float32, m.In))
	defer warm.Destroy()
	warmOut := []ort.Value{nil} // ONNX Runtime allocates it, as the executor's first run of a shape
	if err := s.Run([]ort.Value{warm}, warmOut); err != nil {
		b.Fatal(err)
	}
	warmOut[0].Destroy()
	in, _ := ort.NewTensor(ort.NewShape(int64(n), int64(m.In)), x)
	out, _ := ort.NewEmptyTensor[float32](ort.NewShape(int64(n), int64(m.Out)))
	b.Cleanup(func() { in.Destroy(); out.Destroy(); s.Destroy() })
	return func() {
		if err := s.Run([]ort.Value{in}, []ort.Value{out}); err != nil {
			b.Fatal(err)
		}
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkOCRVariants runs every variant of examples/ocr.yaml at batch 1 and 8 on rendered documents (the
// recognisers on the lines the first detector finds): pre- and post-processing included, as a worker runs them.
func BenchmarkOCRVariants(b *testing.B) {
	models := onnxtest.Runtime(b)
	spec, err := pipeline.LoadForProfiling("../../../examples/ocr.yaml")
	if err != nil {
		b.Fatal(err)
	}
	fonts, _ := ocr.LoadFonts("")
	imgs, _, _ := ocr.Generate(8, 2, fonts)
	var pages, lines []executor.Input
	for i, img := range imgs {
		var buf bytes.Buffer
		png.Encode(&buf, img)
		pages = append(pages, executor.Input{RequestID: fmt.Sprint(i), Tensors: []wire.Tensor{wire.NewBytes(ocr.TensorImage, [][]byte{buf.Bytes()})}})
	}
	for _, task := range spec.Tasks {
		for _, v := range task.Variants {
			if _, err := os.Stat(filepath.Join(models, v.Executor.Model)); err != nil {
				b.Skipf("model %s not found: run `make models`", v.Executor.Model)
			}
			e, err := executor.New(spec, task.Name, v.Name, executor.Options{ModelsDir: models})
			if err != nil {
				b.Fatal(err)
			}
			in := pages
			if len(task.Children) == 0 {
				in = lines
			}
			for _, n := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/batch%d", v.Name, n), func(b *testing.B) {
					// The first batch of a shape sets up its tensors; b.Loop times from its first call.
					if _, err := e.Execute(context.Background(), in[:n]); err != nil {
						b.Fatal(err)
					}
					for b.Loop() {
						if _, err := e.Execute(context.Background(), in[:n]); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			if len(lines) == 0 && len(task.Children) > 0 {
				outs, err := e.Execute(context.Background(), pages)
				if err != nil {
					b.Fatal(err)
				}
				for _, o := range outs {
					for _, ts := range o.Children[task.Children[0]] {
						lines = append(lines, executor.Input{Tensors: ts})
					}
				}
				if len(lines) == 0 {
					b.Fatal("the detector found no line to benchmark the recognisers on")
				}
				for len(lines) < 8 {
					lines = append(lines, lines...)
				}
			}
			e.Close()
		}
	}
}

// Every line reads the same, text and confidence, alone and in batches of 8, on both English recognisers: the
// outputs go back to the right items, and a line is not padded to a wider batch-mate's width (which cost rec_v4 12
// points of lines read exactly in batches of 8), so what the profiler measures in full batches is what is served in
// any batch.
func TestRecognizerReadsTheSameInAnyBatch(t *testing.T) {
	spec, models := ocrSpec(t)
	onnxtest.Models(t, "paddleocr/en_PP-OCRv4_rec.onnx")
	fonts, _ := ocr.LoadFonts("")
	imgs, docs, err := ocr.Generate(20, 31, fonts)
	if err != nil {
		t.Fatal(err)
	}
	var lines []executor.Input
	for i, d := range docs {
		for _, l := range d.Lines {
			pad := 0.25 * (l.Box.Y1 - l.Box.Y0)
			box := ocr.Box{X0: l.Box.X0 - pad, Y0: l.Box.Y0 - pad, X1: l.Box.X1 + pad, Y1: l.Box.Y1 + pad}
			lines = append(lines, executor.Input{Tensors: []wire.Tensor{ocr.PixelTensor(ocr.TensorImage, ocr.Crop(imgs[i], box))}})
		}
	}
	for _, model := range []string{"paddleocr/en_PP-OCRv3_rec_infer.onnx", "paddleocr/en_PP-OCRv4_rec.onnx"} {
		v := *spec.Variant("read_text", "rec")
		v.Executor.Model = model
		rec, err := New(spec, "read_text", &v, models)
		if err != nil {
			t.Fatal(err)
		}
		read := func(batch int) []executor.Output {
			var outs []executor.Output
			for lo := 0; lo < len(lines); lo += batch {
				o, err := rec.Execute(context.Background(), lines[lo:min(lo+batch, len(lines))])
				if err != nil {
					t.Fatal(err)
				}
				outs = append(outs, o...)
			}
			return outs
		}
		alone, batched := read(1), read(8)
		rec.Close()
		differ := 0
		for i := range alone {
			a, _ := alone[i].Tensors[0].Strings()
			b, _ := batched[i].Tensors[0].Strings()
			if a[0] != b[0] || math.Abs(alone[i].Confidence-batched[i].Confidence) > 1e-4 {
				differ++
				if differ <= 3 {
					t.Errorf("%s, line %d: %q (confidence %.4f) alone, %q (%.4f) in a batch of 8", model, i, a[0],
						alone[i].Confidence, b[0], batched[i].Confidence)
				}
			}
		}
		t.Logf("%s: %d of %d lines read differently alone and in batches of 8", model, differ, len(lines))
	}
}
