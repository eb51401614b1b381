package ocr

import (
	"bytes"
	"fmt"
	"image"
	_ "image/jpeg" // request images may be JPEG
	_ "image/png"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Tensor names of the OCR programs (the executor's ocr-detect and ocr-recognize), what clients send and read.
const (
	TensorImage      = "image"      // input: encoded PNG/JPEG (BYTES, one element) or pixels (UINT8 [H, W, 3])
	TensorBox        = "box"        // a line's box in its image: FP32 [4] x0, y0, x1, y1 in pixels
	TensorBoxes      = "boxes"      // ocr-detect's result: FP32 [n, 4], the boxes of the lines found
	TensorText       = "text"       // ocr-recognize's result: BYTES [1]
	TensorConfidence = "confidence" // ocr-recognize's result: FP32 [1], mean probability of the characters read
)

// MaxImagePixels bounds an image's size (width x height), encoded or as pixels: 32 megapixels, 128 MiB decoded,
// larger than any photograph a request of the default 8 MiB limit carries.
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
			// The shape is the sender's claim, and H x W x 3 wraps around in 64 bits ([274177, 67280421310721, 3]
			// is 3): the pixels are bounded without multiplying, then the data checked against the product.
			if t.Shape[0] > MaxImagePixels/t.Shape[1] {
				return nil, fmt.Errorf("tensor %q: image of %dx%d pixels; the limit is %d pixels", t.Name,
					t.Shape[1], t.Shape[0], MaxImagePixels)
			}
			if err := t.Validate(); err != nil {
				return nil, err
			}
			h, w := int(t.Shape[0]), int(t.Shape[1])
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

// ReadOf is the line an ocr-recognize output carries: its text and its box; ok is false when either is missing.
func ReadOf(ts []wire.Tensor) (read Read, ok bool) {
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
func BoxOf(ts []wire.Tensor) (Box, bool) {
	for _, t := range ts {
		if t.Name == TensorBox {
			if v, err := t.FP32(); err == nil && len(v) == 4 {
				return Box{X0: float64(v[0]), Y0: float64(v[1]), X1: float64(v[2]), Y1: float64(v[3])}, true
			}
		}
	}
	return Box{}, false
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
