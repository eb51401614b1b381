// Package onnxexec is the executor kind "onnx": a variant's model run with ONNX Runtime, inside its program (plain
// tensors, or the OCR programs' pre- and post-processing). Importing it registers the kind and links ONNX Runtime.
package onnxexec

import (
	"context"
	"fmt"
	"image"
	"path/filepath"
	"slices"

	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/onnx"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func init() {
	executor.Register(pipeline.ExecutorONNX, func(spec *pipeline.Spec, task string, v *pipeline.Variant,
		opts executor.Options) (executor.Executor, error) {
		dir := opts.ModelsDir
		if dir == "" {
			dir = onnx.ModelsDir()
		}
		return New(spec, task, v, dir)
	})
}

// recMaxWidth bounds the recogniser's input width: longer lines are squeezed, as PaddleOCR's are.
const recMaxWidth = 1280

// Executor runs a variant's model with ONNX Runtime, with the program (pre- and post-processing) around it. The session
// is created once, when the variant is loaded, and warmed up before the first batch.
type Executor struct {
	program string
	sess    *onnx.Session
	size    int    // ocr-detect: square input side; ocr-recognize: least input width
	child   string // ocr-detect: the task each line goes to
	db      ocr.DBOptions
	inShape []int64 // tensor: the model's input shape (the first dimension is the batch)
}

// New loads variant v of task from the models directory and warms it up.
func New(spec *pipeline.Spec, task string, v *pipeline.Variant, modelsDir string) (*Executor, error) {
	x := v.Executor
	if err := onnx.Init(onnx.LibraryPath(modelsDir)); err != nil {
		return nil, err
	}
	threads := x.Threads
	if threads == 0 {
		threads = 1
	}
	sess, err := onnx.Open(filepath.Join(modelsDir, x.Model), onnx.SessionOptions{IntraOpThreads: threads})
	if err != nil {
		return nil, fmt.Errorf("variant %s/%s: %w", task, v.Name, err)
	}
	e := &Executor{program: x.Program, sess: sess, size: x.InputSize, db: ocr.DefaultDB, inShape: sess.InputShape()}
	if e.program == "" {
		e.program = pipeline.ProgramTensor
	}
	var warm []int64
	switch e.program {
	case pipeline.ProgramOCRDetect:
		if e.size == 0 {
			e.size = 640
		}
		e.child = spec.Task(task).Children[0]
		warm = []int64{1, 3, int64(e.size), int64(e.size)}
	case pipeline.ProgramOCRRecognize:
		if e.size == 0 {
			e.size = 320
		}
		warm = []int64{1, 3, ocr.RecHeight, int64(e.size)}
	default:
		warm = slices.Clone(e.inShape)
		for i, d := range warm {
			if d < 0 {
				warm[i] = 1
			}
		}
	}
	n := 1
	for _, d := range warm {
		n *= int(d)
	}
	if _, err := sess.Run(warm, make([]float32, n)); err != nil {
		sess.Close()
		return nil, fmt.Errorf("variant %s/%s: warm-up: %w", task, v.Name, err)
	}
	return e, nil
}

// Execute runs one batch. An item whose input is unusable fails on its own (Output.Err); the others run.
func (e *Executor) Execute(ctx context.Context, batch []executor.Input) ([]executor.Output, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch e.program {
	case pipeline.ProgramOCRDetect:
		return e.detect(batch)
	case pipeline.ProgramOCRRecognize:
		return e.recognize(batch)
	default:
		return e.tensor(batch)
	}
}

// Close releases the model.
func (e *Executor) Close() error { return e.sess.Close() }

// decodeImages decodes every item's image; an item without a usable one fails in out, and idx maps the images
// back to their items.
func decodeImages(batch []executor.Input) (out []executor.Output, imgs []image.Image, idx []int) {
	out = make([]executor.Output, len(batch))
	for i, in := range batch {
		img, err := ocr.DecodeImage(in.Tensors)
		if err != nil {
			out[i].Err = err
			continue
		}
		imgs, idx = append(imgs, img), append(idx, i)
	}
	return out, imgs, idx
}

func (e *Executor) detect(batch []executor.Input) ([]executor.Output, error) {
	out, imgs, idx := decodeImages(batch)
	if len(imgs) == 0 {
		return out, nil
	}
	plane := 3 * e.size * e.size
	shape := []int64{int64(len(imgs)), 3, int64(e.size), int64(e.size)}
	data := e.sess.Input(shape)
	scales := make([]float64, len(imgs))
	for j, img := range imgs {
		scales[j] = ocr.DetectorInput(data[j*plane:(j+1)*plane], img, e.size)
	}
	res, err := e.sess.Run(shape, data)
	if err != nil {
		return nil, err
	}
	maps := res[0].Data
	for j, img := range imgs {
		b := img.Bounds()
		boxes := ocr.TextBoxes(maps[j*e.size*e.size:(j+1)*e.size*e.size], e.size, scales[j], b.Dx(), b.Dy(), e.db)
		flat := make([]float32, 0, 4*len(boxes))
		children := make([][]wire.Tensor, len(boxes))
		for k, box := range boxes {
			coords := []float32{float32(box.X0), float32(box.Y0), float32(box.X1), float32(box.Y1)}
			flat = append(flat, coords...)
			children[k] = []wire.Tensor{ocr.PixelTensor(ocr.TensorImage, ocr.Crop(img, box)), wire.NewFP32(ocr.TensorBox, []int64{4}, coords)}
		}
		o := executor.Output{Tensors: []wire.Tensor{wire.NewFP32(ocr.TensorBoxes, []int64{int64(len(boxes)), 4}, flat)}}
		if len(boxes) > 0 {
			o.Children = map[string][][]wire.Tensor{e.child: children}
		}
		out[idx[j]] = o
	}
	return out, nil
}

func (e *Executor) recognize(batch []executor.Input) ([]executor.Output, error) {
	out, crops, idx := decodeImages(batch)
	// One run per input width: a crop padded to a wider batch-mate's width reads differently (rec_v4 read 12 points
	// fewer lines exactly in batches of 8 than alone), so a line would read as its batch happened to be, and the
	// profile, measured in full batches, would not predict what is served. Each line reads at its own width.
	groups := map[int][]int{}
	var widths []int
	for j, c := range crops {
		w := max(e.size, ocr.RecWidth(c, recMaxWidth))
		if groups[w] == nil {
			widths = append(widths, w)
		}
		groups[w] = append(groups[w], j)
	}
	for _, w := range widths {
		if err := e.recognizeGroup(batch, out, crops, idx, groups[w]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// recognizeGroup reads the crops js (of one width) in one run into out.
func (e *Executor) recognizeGroup(batch []executor.Input, out []executor.Output, crops []image.Image, idx, js []int) error {
	group := make([]image.Image, len(js))
	for k, j := range js {
		group[k] = crops[j]
	}
	data, width := ocr.RecognizerInput(group, e.size, recMaxWidth)
	res, err := e.sess.Run([]int64{int64(len(group)), 3, ocr.RecHeight, int64(width)}, data)
	if err != nil {
		return err
	}
	r := res[0]
	if len(r.Shape) != 3 {
		return fmt.Errorf("recogniser output shape %v, want [N, T, classes]", r.Shape)
	}
	steps, classes := int(r.Shape[1]), int(r.Shape[2])
	for k, j := range js {
		text, conf := ocr.DecodeCTC(r.Data[k*steps*classes:(k+1)*steps*classes], steps, classes, ocr.EnglishCharset)
		ts := []wire.Tensor{wire.NewBytes(ocr.TensorText, [][]byte{[]byte(text)}), wire.NewFP32(ocr.TensorConfidence, []int64{1}, []float32{float32(conf)})}
		for _, t := range batch[idx[j]].Tensors {
			if t.Name == ocr.TensorBox {
				ts = append(ts, t)
			}
		}
		out[idx[j]] = executor.Output{Tensors: ts, Confidence: conf}
	}
	return nil
}

// tensor stacks each item's one FP32 input (the model's input shape without the batch dimension) and splits every
// output back along the batch dimension.
func (e *Executor) tensor(batch []executor.Input) ([]executor.Output, error) {
	out, idx := tensorInputs(batch, e.inShape[1:])
	if len(idx) == 0 {
		return out, nil
	}
	// Stack the items straight into the session's input tensor.
	shape := append([]int64{int64(len(idx))}, batch[idx[0]].Tensors[0].Shape...)
	data := e.sess.Input(shape)[:0]
	for _, i := range idx {
		data, _ = batch[i].Tensors[0].AppendFP32(data) // validated above
	}
	res, err := e.sess.Run(shape, data)
	if err != nil {
		return nil, err
	}
	for _, r := range res {
		per := len(r.Data) / len(idx)
		for j, i := range idx {
			out[i].Tensors = append(out[i].Tensors, wire.NewFP32(r.Name, slices.Clone(r.Shape[1:]), r.Data[j*per:(j+1)*per]))
		}
	}
	return out, nil
}

// tensorInputs is the tensor program's input reader: each item's one FP32 input must be well-formed, of the model's
// per-item shape want and of the batch's first item's shape. An item that is not fails in out; idx lists the items
// that run.
func tensorInputs(batch []executor.Input, want []int64) (out []executor.Output, idx []int) {
	out = make([]executor.Output, len(batch))
	idx = make([]int, 0, len(batch))
	for i, in := range batch {
		t, err := fp32Input(in.Tensors)
		if err == nil && !(pipeline.TensorSpec{Shape: want}).ShapeFits(t.Shape) { // -1: any size
			err = fmt.Errorf("input %q has shape %v, the model takes %v per item", t.Name, t.Shape, want)
		}
		if err == nil && len(idx) > 0 && !slices.Equal(t.Shape, batch[idx[0]].Tensors[0].Shape) {
			err = fmt.Errorf("input %q has shape %v, unlike the batch's %v", t.Name, t.Shape, batch[idx[0]].Tensors[0].Shape)
		}
		if err == nil {
			err = t.Validate()
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		idx = append(idx, i)
	}
	return out, idx
}

func fp32Input(ts []wire.Tensor) (wire.Tensor, error) {
	if len(ts) != 1 || ts[0].Datatype != "FP32" {
		return wire.Tensor{}, fmt.Errorf("the model takes one FP32 input tensor per item, got %d tensors", len(ts))
	}
	return ts[0], nil
}
