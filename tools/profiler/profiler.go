// Package profiler measures the variants of an OCR pipeline on this machine, with the real executors and a
// labelled set: latency per batch size, swap time, multiplicative factor, and accuracy per task and per path. It
// writes the profile file the pipeline spec names (`profiles:`).
package profiler

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/executor/onnxexec"
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/onnx"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Config is one profiling run.
type Config struct {
	Spec      *pipeline.Spec
	Set       *ocr.Set
	ModelsDir string
	// Images is how many images of the set are used (0: all).
	Images int
	// Repetitions is how many timed batches of each size are run, after one untimed.
	Repetitions int
	// Progress, if set, is told how far the run is (steps done of total) and what it is doing.
	Progress func(done, total int, what string)
}

// Result is a profile file and the per-path measures behind its path accuracies.
type Result struct {
	File  pipeline.ProfileFile
	Paths []PathMeasure
}

// PathMeasure is the end-to-end accuracy of one path of variants on the labelled set. The path's accuracy, for the
// planner, is LineExactMatch: what a user of OCR counts (a line is right or it is not), and what loadgen checks the
// served replies against.
type PathMeasure struct {
	Detector, Recognizer string
	CharAccuracy         float64 // of whole pages
	LineExactMatch       float64 // ground-truth lines found and read exactly, of all ground-truth lines
}

// Run profiles every variant of an ocr-detect -> ocr-recognize pipeline. A detector's accuracy is the F1 score of
// the lines it finds (IoU >= 0.5); a recogniser's is the share of true lines, cut from the image, that it reads
// exactly; a path's is the share of true lines found and read exactly.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	det, rec, err := ocrTasks(cfg.Spec)
	if err != nil {
		return nil, err
	}
	if err := onnx.Init(onnx.LibraryPath(cfg.ModelsDir)); err != nil {
		return nil, err
	}
	if cfg.Repetitions < 1 {
		cfg.Repetitions = 10
	}
	n := len(cfg.Set.Documents)
	if cfg.Images > 0 && cfg.Images < n {
		n = cfg.Images
	}
	docs := cfg.Set.Documents[:n]
	images := make([]executor.Input, n)
	for i := range docs {
		b, err := cfg.Set.ImageBytes(i)
		if err != nil {
			return nil, err
		}
		images[i] = executor.Input{RequestID: fmt.Sprint(i), ItemID: "0", Tensors: []wire.Tensor{wire.NewBytes(ocr.TensorImage, [][]byte{b})}}
	}
	p := &run{cfg: cfg, spec: cfg.Spec, total: (len(det.Variants) + len(rec.Variants)) * (1 + len(cfg.Spec.BatchSizes))}
	res := &Result{File: pipeline.ProfileFile{Pipeline: cfg.Spec.Name, Measured: pipeline.Measurement{
		Date: time.Now().UTC().Format("2006-01-02"), CPUs: runtime.NumCPU(), Runtime: "onnxruntime " + onnx.Version(),
		Images: n, Repetitions: cfg.Repetitions,
	}}}

	// Detectors: what each finds in every image (kept for the paths), and its own measures.
	found := map[string][][]executor.Input{} // detector -> image -> line crops
	for _, v := range det.Variants {
		vp, crops, err := p.detector(ctx, det.Name, v, images, docs)
		if err != nil {
			return nil, err
		}
		found[v.Name] = crops
		res.File.Variants = append(res.File.Variants, vp)
	}
	// Recognisers: on the true lines (their own accuracy), then on every detector's lines (the paths).
	truth, err := truthCrops(cfg.Set, docs)
	if err != nil {
		return nil, err
	}
	for _, v := range rec.Variants {
		vp, err := p.recognizer(ctx, rec.Name, v, truth, docs)
		if err != nil {
			return nil, err
		}
		res.File.Variants = append(res.File.Variants, vp)
	}
	for _, r := range rec.Variants {
		e, err := onnxexec.New(cfg.Spec, rec.Name, &r, cfg.ModelsDir)
		if err != nil {
			return nil, err
		}
		for _, d := range det.Variants {
			m, rs, err := p.path(ctx, e, found[d.Name], docs)
			if err != nil {
				e.Close()
				return nil, err
			}
			p.keepCrops(r.Name, d.Name, rs, lines(docs))
			m.Detector, m.Recognizer = d.Name, r.Name
			res.Paths = append(res.Paths, m)
			res.File.PathAccuracy = append(res.File.PathAccuracy, pipeline.PathAccuracy{
				Path: []string{wire.VariantKey{Task: det.Name, Variant: d.Name}.String(),
					wire.VariantKey{Task: rec.Name, Variant: r.Name}.String()},
				Accuracy: round(m.LineExactMatch, 4),
			})
		}
		e.Close()
	}
	res.File.Cascades = p.cascadeLevels(det, rec)
	return res, nil
}

// ocrTasks checks that the pipeline is a detector task whose one child is a recogniser task, all onnx.
func ocrTasks(s *pipeline.Spec) (det, rec *pipeline.Task, err error) {
	if len(s.Tasks) != 2 {
		return nil, nil, fmt.Errorf("the profiler measures accuracy on a labelled OCR set: pipeline %s must be two tasks, ocr-detect then ocr-recognize", s.Name)
	}
	det = s.Root()
	if len(det.Children) != 1 {
		return nil, nil, fmt.Errorf("pipeline %s: the root task must have one child", s.Name)
	}
	rec = s.Task(det.Children[0])
	for _, c := range []struct {
		t       *pipeline.Task
		program string
	}{{det, pipeline.ProgramOCRDetect}, {rec, pipeline.ProgramOCRRecognize}} {
		for _, v := range c.t.Variants {
			if v.Executor.Kind != pipeline.ExecutorONNX || v.Executor.Program != c.program {
				return nil, nil, fmt.Errorf("variant %s/%s: the profiler needs kind onnx, program %s", c.t.Name, v.Name, c.program)
			}
		}
	}
	return det, rec, nil
}

type run struct {
	cfg         Config
	spec        *pipeline.Spec
	done, total int
	// truth is each recogniser's reading of the true lines, crops its reading of each detector's items (recogniser,
	// detector), lines how many true lines there are: for the cascades' levels (cascade.go).
	truth map[string][]reading
	crops map[[2]string][]reading
	lines int
}

func (p *run) step(what string) {
	p.done++
	if p.cfg.Progress != nil {
		p.cfg.Progress(p.done, p.total, what)
	}
}

// load creates a variant's executor and measures it: the swap time is the load and warm-up.
func (p *run) load(task string, v pipeline.Variant) (*onnxexec.Executor, float64, error) {
	t0 := time.Now()
	e, err := onnxexec.New(p.spec, task, &v, p.cfg.ModelsDir)
	return e, ms(time.Since(t0)), err
}

// latency times Repetitions batches of each allowed size, cycling through inputs, after one untimed batch.
func (p *run) latency(ctx context.Context, e executor.Executor, task string, v pipeline.Variant, inputs []executor.Input) ([]pipeline.ProfilePoint, error) {
	var points []pipeline.ProfilePoint
	next := 0
	batch := func(b int) []executor.Input {
		out := make([]executor.Input, b)
		for i := range out {
			out[i] = inputs[next%len(inputs)]
			next++
		}
		return out
	}
	for _, b := range p.spec.BatchSizes {
		if _, err := e.Execute(ctx, batch(b)); err != nil {
			return nil, err
		}
		times := make([]float64, p.cfg.Repetitions)
		for r := range times {
			in := batch(b)
			t0 := time.Now()
			if _, err := e.Execute(ctx, in); err != nil {
				return nil, err
			}
			times[r] = ms(time.Since(t0))
		}
		sort.Float64s(times)
		points = append(points, pipeline.ProfilePoint{Batch: b, P50Ms: round(quantile(times, 0.5), 2),
			P95Ms: round(quantile(times, 0.95), 2), P99Ms: round(quantile(times, 0.99), 2)})
		p.step(fmt.Sprintf("%s/%s batch %d", task, v.Name, b))
	}
	return monotone(points), nil
}

// monotone raises each point's latencies to at least those of the smaller batch size before it. A batch cannot take
// less time than a smaller one (it does all of its work and more), so a lower measurement is noise of the machine,
// and a spec whose latency falls as the batch grows does not load (pipeline's validation).
func monotone(points []pipeline.ProfilePoint) []pipeline.ProfilePoint {
	for k := 1; k < len(points); k++ {
		prev, pt := points[k-1], &points[k]
		pt.P50Ms = max(pt.P50Ms, prev.P50Ms)
		pt.P95Ms = max(pt.P95Ms, prev.P95Ms)
		if pt.P99Ms != 0 {
			pt.P99Ms = max(pt.P99Ms, prev.P99Ms)
		}
	}
	return points
}

func (p *run) detector(ctx context.Context, task string, v pipeline.Variant, images []executor.Input, docs []ocr.Document) (pipeline.VariantProfile, [][]executor.Input, error) {
	e, swap, err := p.load(task, v)
	if err != nil {
		return pipeline.VariantProfile{}, nil, err
	}
	defer e.Close()
	crops := make([][]executor.Input, len(images))
	child := p.spec.Task(task).Children[0]
	var found, detected, lines int
	maxBatch := p.spec.BatchSizes[len(p.spec.BatchSizes)-1]
	for lo := 0; lo < len(images); lo += maxBatch {
		hi := min(lo+maxBatch, len(images))
		outs, err := e.Execute(ctx, images[lo:hi])
		if err != nil {
			return pipeline.VariantProfile{}, nil, err
		}
		for j, o := range outs {
			i := lo + j
			if o.Err != nil {
				return pipeline.VariantProfile{}, nil, fmt.Errorf("%s: %w", docs[i].File, o.Err)
			}
			var boxes []ocr.Box
			for k, ts := range o.Children[child] {
				crops[i] = append(crops[i], executor.Input{RequestID: fmt.Sprint(i), ItemID: fmt.Sprint(k), Tensors: ts})
				b, _ := ocr.BoxOf(ts)
				boxes = append(boxes, b)
			}
			for _, m := range ocr.MatchLines(boxes, docs[i].Lines) {
				if m >= 0 {
					found++
				}
			}
			detected += len(boxes)
			lines += len(docs[i].Lines)
		}
	}
	p.step(fmt.Sprintf("%s/%s accuracy", task, v.Name))
	points, err := p.latency(ctx, e, task, v, images)
	if err != nil {
		return pipeline.VariantProfile{}, nil, err
	}
	recall, precision := ratio(found, lines), ratio(found, detected)
	f1 := 0.0
	if recall+precision > 0 {
		f1 = 2 * recall * precision / (recall + precision)
	}
	return pipeline.VariantProfile{Task: task, Variant: v.Name, Accuracy: round(f1, 4), SwapMs: round(swap, 1),
		Fanout: round(float64(detected)/float64(len(images)), 3), Profile: points,
		Metrics: map[string]float64{"line_recall": round(recall, 4), "line_precision": round(precision, 4)}}, crops, nil
}

func (p *run) recognizer(ctx context.Context, task string, v pipeline.Variant, truth [][]executor.Input, docs []ocr.Document) (pipeline.VariantProfile, error) {
	e, swap, err := p.load(task, v)
	if err != nil {
		return pipeline.VariantProfile{}, err
	}
	defer e.Close()
	var all []executor.Input
	for _, c := range truth {
		all = append(all, c...)
	}
	texts, confs, err := recognize(ctx, e, all, p.spec.BatchSizes[len(p.spec.BatchSizes)-1])
	if err != nil {
		return pipeline.VariantProfile{}, err
	}
	p.keepTruth(v.Name, texts, confs, docs)
	var charAcc float64
	exact, k := 0, 0
	for _, d := range docs {
		for _, l := range d.Lines {
			charAcc += ocr.CharAccuracy(texts[k], l.Text)
			if texts[k] == l.Text {
				exact++
			}
			k++
		}
	}
	p.step(fmt.Sprintf("%s/%s accuracy", task, v.Name))
	points, err := p.latency(ctx, e, task, v, all)
	if err != nil {
		return pipeline.VariantProfile{}, err
	}
	return pipeline.VariantProfile{Task: task, Variant: v.Name, Accuracy: round(ratio(exact, k), 4), SwapMs: round(swap, 1),
		Profile: points, Metrics: map[string]float64{"char_accuracy": round(charAcc/float64(k), 4), "line_exact_match": round(ratio(exact, k), 4)}}, nil
}

// path reads the lines one detector found with one recogniser and scores every page; it returns the reading of each
// item found, in order (right when it matches a true line and reads it exactly).
func (p *run) path(ctx context.Context, e executor.Executor, crops [][]executor.Input, docs []ocr.Document) (PathMeasure, []reading, error) {
	var all []executor.Input
	for _, c := range crops {
		all = append(all, c...)
	}
	texts, confs, err := recognize(ctx, e, all, p.spec.BatchSizes[len(p.spec.BatchSizes)-1])
	if err != nil {
		return PathMeasure{}, nil, err
	}
	var m PathMeasure
	rs := make([]reading, len(all))
	exact, k := 0, 0
	for i, d := range docs {
		reads := make([]ocr.Read, len(crops[i]))
		boxes := make([]ocr.Box, len(crops[i]))
		for j, c := range crops[i] {
			boxes[j], _ = ocr.BoxOf(c.Tensors)
			reads[j] = ocr.Read{Box: boxes[j], Text: texts[k+j]}
			rs[k+j].conf = confs[k+j]
		}
		for g, j := range ocr.MatchLines(boxes, d.Lines) {
			if j >= 0 && reads[j].Text == d.Lines[g].Text {
				rs[k+j].right = true
			}
		}
		s := ocr.ScorePage(reads, d.Lines)
		m.CharAccuracy += s.CharAccuracy
		exact += s.ExactLines
		k += len(crops[i])
	}
	m.CharAccuracy /= float64(len(docs))
	m.LineExactMatch = ratio(exact, lines(docs))
	return m, rs, nil
}

// lines is how many true lines docs have.
func lines(docs []ocr.Document) int {
	n := 0
	for _, d := range docs {
		n += len(d.Lines)
	}
	return n
}

// recognize reads every input, maxBatch at a time: each one's text and the recogniser's confidence in it.
func recognize(ctx context.Context, e executor.Executor, inputs []executor.Input, maxBatch int) ([]string, []float64,
	error) {
	texts := make([]string, 0, len(inputs))
	confs := make([]float64, 0, len(inputs))
	for lo := 0; lo < len(inputs); lo += maxBatch {
		outs, err := e.Execute(ctx, inputs[lo:min(lo+maxBatch, len(inputs))])
		if err != nil {
			return nil, nil, err
		}
		for _, o := range outs {
			if o.Err != nil {
				return nil, nil, o.Err
			}
			read, _ := ocr.ReadOf(o.Tensors)
			texts = append(texts, read.Text)
			confs = append(confs, o.Confidence)
		}
	}
	return texts, confs, nil
}

// truthCrops cuts every true line out of its image, with a margin like the one the detector's unclipping adds.
func truthCrops(set *ocr.Set, docs []ocr.Document) ([][]executor.Input, error) {
	out := make([][]executor.Input, len(docs))
	for i, d := range docs {
		b, err := set.ImageBytes(i)
		if err != nil {
			return nil, err
		}
		img, err := ocr.DecodeImage([]wire.Tensor{wire.NewBytes(ocr.TensorImage, [][]byte{b})})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.File, err)
		}
		for j, l := range d.Lines {
			pad := 0.25 * (l.Box.Y1 - l.Box.Y0)
			box := ocr.Box{X0: l.Box.X0 - pad, Y0: l.Box.Y0 - pad, X1: l.Box.X1 + pad, Y1: l.Box.Y1 + pad}
			out[i] = append(out[i], executor.Input{RequestID: fmt.Sprint(i), ItemID: fmt.Sprint(j),
				Tensors: []wire.Tensor{ocr.PixelTensor(ocr.TensorImage, ocr.Crop(img, box))}})
		}
	}
	return out, nil
}

// WriteTable prints the profile as a table: one row per variant, then one per path.
func (r *Result) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	batches := []string{}
	if len(r.File.Variants) > 0 {
		for _, p := range r.File.Variants[0].Profile {
			batches = append(batches, fmt.Sprintf("b%d p50/p95 ms", p.Batch))
		}
	}
	fmt.Fprintf(tw, "variant\tswap ms\t%s\tfactor\taccuracy\tmeasures\t\n", strings.Join(batches, "\t"))
	for _, v := range r.File.Variants {
		var cells []string
		for _, p := range v.Profile {
			cells = append(cells, fmt.Sprintf("%.1f/%.1f", p.P50Ms, p.P95Ms))
		}
		factor := "-"
		if v.Fanout > 0 {
			factor = fmt.Sprintf("%.2f", v.Fanout)
		}
		fmt.Fprintf(tw, "%s/%s\t%.0f\t%s\t%s\t%.4f\t%s\t\n", v.Task, v.Variant, v.SwapMs, strings.Join(cells, "\t"), factor, v.Accuracy, metrics(v.Metrics))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "path\tpage char accuracy\tline exact match\t\n")
	for _, m := range r.Paths {
		fmt.Fprintf(tw, "%s -> %s\t%.4f\t%.4f\t\n", m.Detector, m.Recognizer, m.CharAccuracy, m.LineExactMatch)
	}
	tw.Flush()
}

func metrics(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.3f", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := q * float64(len(sorted)-1)
	lo := int(math.Floor(i))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(i-float64(lo))
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// Header is the comment the profile file starts with.
func Header(cmd string) string {
	return "# Measured by `" + cmd + "` (tools/profiler); regenerate it rather than editing it.\n"
}
