// Package ocr is the code around the OCR models, in Go: image pre-processing, the DB detector's post-processing
// (probability map to text boxes), line crops, CTC decoding of the recogniser's output, the accuracy measures, and a
// generator of labelled document images. It is pure: no NATS and no ONNX Runtime.
package ocr

import "math"

// Box is an axis-aligned box in pixels: [X0, X1) x [Y0, Y1).
type Box struct {
	X0 float64 `json:"x0"`
	Y0 float64 `json:"y0"`
	X1 float64 `json:"x1"`
	Y1 float64 `json:"y1"`
}

// Area is the box's area (0 for an empty box).
func (b Box) Area() float64 { return math.Max(0, b.X1-b.X0) * math.Max(0, b.Y1-b.Y0) }

// IoU is the intersection over union of two boxes.
func IoU(a, b Box) float64 {
	in := Box{X0: math.Max(a.X0, b.X0), Y0: math.Max(a.Y0, b.Y0), X1: math.Min(a.X1, b.X1), Y1: math.Min(a.Y1, b.Y1)}.Area()
	u := a.Area() + b.Area() - in
	if u <= 0 {
		return 0
	}
	return in / u
}
