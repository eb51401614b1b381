package executor

import (
	"bytes"
	"context"
	"fmt"
	"image"
	_ "image/jpeg" // request images may be JPEG
	_ "image/png"
	"path/filepath"
	"slices"

	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/onnx"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Tensor names of the OCR programs.
const (
	TensorImage      = "image"      // input: encoded PNG/JPEG (BYTES, one element) or pixels (UINT8 [H, W, 3])
	TensorBox        = "box"        // a line's box in its image: FP32 [4] x0, y0, x1, y1 in pixels
	TensorBoxes      = "boxes"      // ocr-detect's result: FP32 [n, 4], the boxes of the lines found
	TensorText       = "text"       // ocr-recognize's result: BYTES [1]
	TensorConfidence = "confidence" // ocr-recognize's result: FP32 [1], mean probability of the characters read
)

// recMaxWidth bounds the recogniser's input width: longer lines are squeezed, as PaddleOCR's are.
const recMaxWidth = 1280

// ONNX runs a variant's model with ONNX Runtime, with the program (pre- and post-processing) around it. The session
// is created once, when the variant is loaded, and warmed up before the first batch.
type ONNX struct {
	program string
	sess    *onnx.Session
	size    int    // ocr-detect: square input side; ocr-recognize: least input width
	child   string // ocr-detect: the task each line goes to
	db      ocr.DBOptions
	inShape []int64 // tensor: the model's input shape (the first dimension is the batch)
}

// NewONNX loads variant v of task from the models directory and warms it up.
func NewONNX(spec *pipeline.Spec, task string, v *pipeline.Variant, modelsDir string) (*ONNX, error) {
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
	e := &ONNX{program: x.Program, sess: sess, size: x.InputSize, db: ocr.DefaultDB, inShape: sess.InputShape()}
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
func (e *ONNX) Execute(ctx context.Context, batch []Input) ([]Output, error) {
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
func (e *ONNX) Close() error { return e.sess.Close() }

// decodeImages decodes every item's image; an item without a usable one fails in out, and idx maps the images
// back to their items.
func decodeImages(batch []Input) (out []Output, imgs []image.Image, idx []int) {
	out = make([]Output, len(batch))
	for i, in := range batch {
		img, err := DecodeImage(in.Tensors)
		if err != nil {
			out[i].Err = err
			continue
		}
		imgs, idx = append(imgs, img), append(idx, i)
	}
	return out, imgs, idx
}

func (e *ONNX) detect(batch []Input) ([]Output, error) {
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
			children[k] = []wire.Tensor{PixelTensor(TensorImage, ocr.Crop(img, box)), wire.NewFP32(TensorBox, []int64{4}, coords)}
		}
		o := Output{Tensors: []wire.Tensor{wire.NewFP32(TensorBoxes, []int64{int64(len(boxes)), 4}, flat)}}
		if len(boxes) > 0 {
			o.Children = map[string][][]wire.Tensor{e.child: children}
		}
		out[idx[j]] = o
	}
	return out, nil
}

func (e *ONNX) recognize(batch []Input) ([]Output, error) {
	out, crops, idx := decodeImages(batch)
	if len(crops) == 0 {
		return out, nil
	}
	data, width := ocr.RecognizerInput(crops, e.size, recMaxWidth)
	res, err := e.sess.Run([]int64{int64(len(crops)), 3, ocr.RecHeight, int64(width)}, data)
	if err != nil {
		return nil, err
	}
	r := res[0]
	if len(r.Shape) != 3 {
		return nil, fmt.Errorf("recogniser output shape %v, want [N, T, classes]", r.Shape)
	}
	steps, classes := int(r.Shape[1]), int(r.Shape[2])
	for j := range crops {
		text, conf := ocr.DecodeCTC(r.Data[j*steps*classes:(j+1)*steps*classes], steps, classes, ocr.EnglishCharset)
		ts := []wire.Tensor{wire.NewBytes(TensorText, [][]byte{[]byte(text)}), wire.NewFP32(TensorConfidence, []int64{1}, []float32{float32(conf)})}
		for _, t := range batch[idx[j]].Tensors {
			if t.Name == TensorBox {
				ts = append(ts, t)
			}
		}
		out[idx[j]] = Output{Tensors: ts}
	}
	return out, nil
}

// tensor stacks each item's one FP32 input (the model's input shape without the batch dimension) and splits every
// output back along the batch dimension.
func (e *ONNX) tensor(batch []Input) ([]Output, error) {
	out := make([]Output, len(batch))
	want := e.inShape[1:]
	idx := make([]int, 0, len(batch))
	for i, in := range batch {
		t, err := fp32Input(in.Tensors)
		if err == nil && !shapeFits(t.Shape, want) {
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

func fp32Input(ts []wire.Tensor) (wire.Tensor, error) {
	if len(ts) != 1 || ts[0].Datatype != "FP32" {
		return wire.Tensor{}, fmt.Errorf("the model takes one FP32 input tensor per item, got %d tensors", len(ts))
	}
	return ts[0], nil
}

// shapeFits says whether an item's shape matches the model's per-item shape (-1: any size).
func shapeFits(got, want []int64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if want[i] >= 0 && got[i] != want[i] {
			return false
		}
	}
	return true
}

// MaxImagePixels bounds an encoded image's size (width x height): 32 megapixels, 128 MiB decoded, larger than any
// photograph a request of the default 8 MiB limit carries.
const MaxImagePixels = 32 << 20

// DecodeImage finds an item's image: the tensor named "image", encoded (BYTES: PNG or JPEG) or as pixels (UINT8
// [H, W, 3]).
func DecodeImage(ts []wire.Tensor) (image.Image, error) {
	for _, t := range ts {
		if t.Name != TensorImage {
			continue
		}
		switch t.Datatype {
		case wire.DatatypeBytes:
			els, err := t.Elements()
			if err != nil {
				return nil, err
			}
			if len(els) != 1 {
				return nil, fmt.Errorf("tensor %q: want one encoded image, got %d elements", t.Name, len(els))
			}
			// A header may claim any size: 69 bytes of PNG can claim 50000x50000 pixels, which image.Decode would
			// allocate (10 GB) before reading a row. The size is checked against MaxImagePixels first.
			cfg, _, err := image.DecodeConfig(bytes.NewReader(els[0]))
			if err != nil {
				return nil, fmt.Errorf("tensor %q: not a PNG or JPEG image: %w", t.Name, err)
			}
			if px := int64(cfg.Width) * int64(cfg.Height); px > MaxImagePixels || cfg.Width < 1 || cfg.Height < 1 {
				return nil, fmt.Errorf("tensor %q: image of %dx%d pixels; the limit is %d pixels", t.Name,
					cfg.Width, cfg.Height, MaxImagePixels)
			}
			img, _, err := image.Decode(bytes.NewReader(els[0]))
			if err != nil {
				return nil, fmt.Errorf("tensor %q: not a PNG or JPEG image: %w", t.Name, err)
			}
			return img, nil
		case "UINT8":
			if len(t.Shape) != 3 || t.Shape[2] != 3 || t.Shape[0] < 1 || t.Shape[1] < 1 {
				return nil, fmt.Errorf("tensor %q: pixels must be UINT8 [H, W, 3], got shape %v", t.Name, t.Shape)
			}
			h, w := int(t.Shape[0]), int(t.Shape[1])
			if len(t.Data) != h*w*3 {
				return nil, fmt.Errorf("tensor %q: %d bytes for shape %v", t.Name, len(t.Data), t.Shape)
			}
			img := image.NewRGBA(image.Rect(0, 0, w, h))
			for i := 0; i < h*w; i++ {
				copy(img.Pix[4*i:4*i+3], t.Data[3*i:3*i+3])
				img.Pix[4*i+3] = 255
			}
			return img, nil
		default:
			return nil, fmt.Errorf("tensor %q is %s: want BYTES (PNG/JPEG) or UINT8 pixels", t.Name, t.Datatype)
		}
	}
	return nil, fmt.Errorf("no %q input tensor", TensorImage)
}

// ReadOCR is the line an ocr-recognize output carries: its text and its box; ok is false when either is missing.
func ReadOCR(ts []wire.Tensor) (read ocr.Read, ok bool) {
	text := false
	for _, t := range ts {
		if t.Name == TensorText {
			if s, err := t.Strings(); err == nil && len(s) == 1 {
				read.Text, text = s[0], true
			}
		}
	}
	box, hasBox := BoxOf(ts)
	read.Box = box
	return read, text && hasBox
}

// BoxOf is the line box among an item's tensors (the "box" an ocr-detect sub-request or an ocr-recognize output
// carries).
func BoxOf(ts []wire.Tensor) (ocr.Box, bool) {
	for _, t := range ts {
		if t.Name == TensorBox {
			if v, err := t.FP32(); err == nil && len(v) == 4 {
				return ocr.Box{X0: float64(v[0]), Y0: float64(v[1]), X1: float64(v[2]), Y1: float64(v[3])}, true
			}
		}
	}
	return ocr.Box{}, false
}

// PixelTensor carries an image's pixels as UINT8 [H, W, 3].
func PixelTensor(name string, img *image.RGBA) wire.Tensor {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	data := make([]byte, 0, w*h*3)
	for y := 0; y < h; y++ {
		row := img.Pix[y*img.Stride:]
		for x := 0; x < w; x++ {
			data = append(data, row[4*x:4*x+3]...)
		}
	}
	return wire.Tensor{Name: name, Datatype: "UINT8", Shape: []int64{int64(h), int64(w), 3}, Data: data}
}
