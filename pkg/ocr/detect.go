package ocr

import (
	"image"
	"image/color"
	"math"
	"sort"

	"golang.org/x/image/draw"
)

// PaddleOCR's normalisation of detector inputs, per channel in BGR order (its images come from OpenCV).
var (
	detMean = [3]float32{0.485, 0.456, 0.406}
	detStd  = [3]float32{0.229, 0.224, 0.225}
)

// DetectorInput resizes img so that its long side is size (keeping its aspect), normalises it as PaddleOCR does
// and pads it to size x size, writing [3, size, size] into dst (len 3*size*size). A fixed square keeps the latency of
// a batch independent of the images in it, so that the profile holds; size should be a multiple of 32. It returns
// the scale from image to tensor pixels.
func DetectorInput(dst []float32, img image.Image, size int) float64 {
	b := img.Bounds()
	scale := float64(size) / float64(max(b.Dx(), b.Dy()))
	w, h := max(1, int(math.Round(float64(b.Dx())*scale))), max(1, int(math.Round(float64(b.Dy())*scale)))
	w, h = min(w, size), min(h, size)
	rs := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.BiLinear.Scale(rs, rs.Bounds(), img, b, draw.Src, nil)
	plane := size * size
	for i := range dst[:3*plane] {
		dst[i] = 0
	}
	for y := 0; y < h; y++ {
		row := rs.Pix[y*rs.Stride:]
		for x := 0; x < w; x++ {
			p := row[4*x:]
			// BGR order: channel 0 is blue.
			for c, v := range [3]uint8{p[2], p[1], p[0]} {
				dst[c*plane+y*size+x] = (float32(v)/255 - detMean[c]) / detStd[c]
			}
		}
	}
	return scale
}

// DBOptions are the DB post-processing thresholds (PaddleOCR's defaults).
type DBOptions struct {
	Thresh      float32 // a pixel is text when its probability exceeds this (0.3)
	BoxThresh   float32 // a region is kept when its mean probability exceeds this (0.6)
	UnclipRatio float64 // how far a region's box grows: area*ratio/perimeter on every side (1.5)
	MinSize     float64 // regions whose short side is smaller, in probability-map pixels, are dropped (3)
}

// DefaultDB are PaddleOCR's DB post-processing defaults.
var DefaultDB = DBOptions{Thresh: 0.3, BoxThresh: 0.6, UnclipRatio: 1.5, MinSize: 3}

// TextBoxes turns a detector's probability map (size x size, row-major) into text boxes in the coordinates of the
// original image (scale from DetectorInput, imgW x imgH), in reading order: the connected regions of text pixels,
// scored by their mean probability, each box grown as DB's unclipping grows it.
func TextBoxes(prob []float32, size int, scale float64, imgW, imgH int, o DBOptions) []Box {
	seen := make([]bool, size*size)
	var stack []int
	var boxes []Box
	for start, p := range prob[:size*size] {
		if seen[start] || p <= o.Thresh {
			continue
		}
		// Flood the 8-connected region.
		seen[start] = true
		stack = append(stack[:0], start)
		x0, y0, x1, y1 := size, size, -1, -1
		var sum float64
		n := 0
		for len(stack) > 0 {
			i := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			x, y := i%size, i/size
			x0, y0, x1, y1 = min(x0, x), min(y0, y), max(x1, x), max(y1, y)
			sum += float64(prob[i])
			n++
			for dy := -1; dy <= 1; dy++ {
				for dx := -1; dx <= 1; dx++ {
					nx, ny := x+dx, y+dy
					if nx < 0 || ny < 0 || nx >= size || ny >= size {
						continue
					}
					j := ny*size + nx
					if !seen[j] && prob[j] > o.Thresh {
						seen[j] = true
						stack = append(stack, j)
					}
				}
			}
		}
		if float32(sum/float64(n)) < o.BoxThresh {
			continue
		}
		w, h := float64(x1-x0+1), float64(y1-y0+1)
		if math.Min(w, h) < o.MinSize {
			continue
		}
		d := w * h * o.UnclipRatio / (2 * (w + h))
		b := Box{
			X0: math.Max(0, (float64(x0)-d)/scale), Y0: math.Max(0, (float64(y0)-d)/scale),
			X1: math.Min(float64(imgW), (float64(x1+1)+d)/scale), Y1: math.Min(float64(imgH), (float64(y1+1)+d)/scale),
		}
		boxes = append(boxes, b)
	}
	SortReadingOrder(boxes)
	return boxes
}

// SortReadingOrder sorts boxes top to bottom, and left to right within a row.
func SortReadingOrder(boxes []Box) {
	sort.SliceStable(boxes, func(i, j int) bool { return readingBefore(boxes[i], boxes[j]) })
}

// sameRow says whether two boxes are on one row of text: their vertical centres are closer than half the shorter
// height.
func sameRow(a, b Box) bool {
	return math.Abs((a.Y0+a.Y1)/2-(b.Y0+b.Y1)/2) < math.Min(a.Y1-a.Y0, b.Y1-b.Y0)/2
}

func readingBefore(a, b Box) bool {
	if sameRow(a, b) {
		return a.X0 < b.X0
	}
	return a.Y0+a.Y1 < b.Y0+b.Y1
}

// Crop copies the pixels of img inside box (rounded outwards, clipped to the image).
func Crop(img image.Image, box Box) *image.RGBA {
	b := img.Bounds()
	r := image.Rect(int(math.Floor(box.X0)), int(math.Floor(box.Y0)), int(math.Ceil(box.X1)), int(math.Ceil(box.Y1))).
		Add(b.Min).Intersect(b)
	out := image.NewRGBA(image.Rect(0, 0, max(1, r.Dx()), max(1, r.Dy())))
	if r.Empty() {
		draw.Draw(out, out.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
		return out
	}
	draw.Draw(out, out.Bounds(), img, r.Min, draw.Src)
	return out
}
