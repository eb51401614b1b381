package ocr

import (
	"image"
	"math"
	"strings"
	"unicode/utf8"

	"golang.org/x/image/draw"
)

// RecHeight is the height of the recognisers' input.
const RecHeight = 48

// RecWidth is the width of one crop at the recogniser's height, keeping its aspect, between 1 and maxWidth.
func RecWidth(img image.Image, maxWidth int) int {
	b := img.Bounds()
	w := int(math.Ceil(float64(RecHeight) * float64(b.Dx()) / float64(max(1, b.Dy()))))
	return max(1, min(w, maxWidth))
}

// RecognizerInput resizes each crop to height 48 (keeping its aspect, squeezed to at most maxWidth), normalises it to
// [-1, 1] as PaddleOCR does and pads it on the right to the batch's width (the widest crop, and at least minWidth)
// by repeating its last column.
// It returns the [N, 3, 48, W] tensor and W.
func RecognizerInput(crops []image.Image, minWidth, maxWidth int) ([]float32, int) {
	width := minWidth
	ws := make([]int, len(crops))
	for i, c := range crops {
		ws[i] = RecWidth(c, maxWidth)
		width = max(width, ws[i])
	}
	plane := RecHeight * width
	dst := make([]float32, len(crops)*3*plane)
	for i, c := range crops {
		rs := image.NewRGBA(image.Rect(0, 0, ws[i], RecHeight))
		draw.BiLinear.Scale(rs, rs.Bounds(), c, c.Bounds(), draw.Src, nil)
		base := i * 3 * plane
		for y := 0; y < RecHeight; y++ {
			row := rs.Pix[y*rs.Stride:]
			for x := 0; x < width; x++ {
				// Past the crop, its last column again: padding that looks like the line's own background reads
				// as nothing, so a line reads the same whatever the width of the batch it is in.
				p := row[4*min(x, ws[i]-1):]
				for ch, v := range [3]uint8{p[2], p[1], p[0]} { // BGR
					dst[base+ch*plane+y*width+x] = float32(v)/127.5 - 1
				}
			}
		}
	}
	return dst, width
}

// EnglishCharset is the English recognisers' dictionary: PaddleOCR's en_dict.txt (the 95 printable ASCII characters,
// from '0', ending with a space), then the space PaddleOCR appends (use_space_char). Class 0 is the CTC blank, so
// class k is EnglishCharset[k-1]: 97 classes.
var EnglishCharset = []rune("0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~!\"#$%&'()*+,-./  ")

// DecodeCTC greedily decodes one item of a recogniser's output, probs [T, C] row-major: the most likely class at each
// step, repeats collapsed, blanks removed. Class k > 0 is charset[k-1]. The confidence is the mean probability of
// the characters kept (0 for an empty string).
func DecodeCTC(probs []float32, steps, classes int, charset []rune) (string, float64) {
	var sb strings.Builder
	prev, kept := -1, 0
	var conf float64
	for t := 0; t < steps; t++ {
		row := probs[t*classes : (t+1)*classes]
		best := 0
		for k := 1; k < classes; k++ {
			if row[k] > row[best] {
				best = k
			}
		}
		if best != 0 && best != prev && best-1 < len(charset) {
			sb.WriteRune(charset[best-1])
			conf += float64(row[best])
			kept++
		}
		prev = best
	}
	if kept == 0 {
		return "", 0
	}
	return strings.TrimSpace(sb.String()), conf / float64(kept)
}

// CharAccuracy is 1 - (edit distance / length of the truth), at least 0: 1 when the strings are equal.
func CharAccuracy(got, truth string) float64 {
	n := utf8.RuneCountInString(truth)
	if n == 0 {
		if got == "" {
			return 1
		}
		return 0
	}
	return math.Max(0, 1-float64(EditDistance(got, truth))/float64(n))
}

// EditDistance is the Levenshtein distance between two strings, in runes.
func EditDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			c := prev[j-1]
			if ra[i-1] != rb[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
