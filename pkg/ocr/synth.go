package ocr

import (
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/image/draw"
	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goitalic"
	"golang.org/x/image/font/gofont/gomono"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/f64"
	"golang.org/x/image/math/fixed"
)

// Line is one line of text in a labelled image: the string rendered and the box of its ink, in pixels.
type Line struct {
	Text string `json:"text"`
	Box  Box    `json:"box"`
}

// Document is one labelled image of a set.
type Document struct {
	File   string `json:"file"` // relative to the set's directory
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Font   string `json:"font"`
	Lines  []Line `json:"lines"`
}

// Set is a labelled set: labels.json in a directory, beside the images it names.
type Set struct {
	Seed      uint64     `json:"seed"`
	Fonts     []string   `json:"fonts"`
	Documents []Document `json:"documents"`
	dir       string
}

// LabelsFile is the name of a set's ground truth in its directory.
const LabelsFile = "labels.json"

// Font is a parsed font with the name the labels record.
type Font struct {
	Name string
	font *opentype.Font
}

// dejaVu are the DejaVu faces used from a fonts directory (Debian fonts-dejavu-core).
var dejaVu = []string{"DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf"}

// LoadFonts returns Go's own fonts (always there) and the DejaVu faces found in dir ("" for none).
func LoadFonts(dir string) ([]Font, error) {
	var fs []Font
	for _, f := range []struct {
		name string
		ttf  []byte
	}{{"Go-Regular", goregular.TTF}, {"Go-Mono", gomono.TTF}, {"Go-Bold", gobold.TTF}, {"Go-Italic", goitalic.TTF}} {
		p, err := opentype.Parse(f.ttf)
		if err != nil {
			return nil, fmt.Errorf("font %s: %w", f.name, err)
		}
		fs = append(fs, Font{Name: f.name, font: p})
	}
	if dir == "" {
		return fs, nil
	}
	found := 0
	for _, name := range dejaVu {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		p, err := opentype.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("font %s: %w", name, err)
		}
		fs = append(fs, Font{Name: strings.TrimSuffix(name, ".ttf"), font: p})
		found++
	}
	if found == 0 {
		return nil, fmt.Errorf("no DejaVu font (%s) in %s: install fonts-dejavu-core, or pass an empty fonts directory for Go's fonts only", strings.Join(dejaVu, ", "), dir)
	}
	return fs, nil
}

var words = strings.Fields(`the of and to in is for on that by with from at as are this be or an was it not have
	order invoice total amount date number account customer payment balance due item price quantity tax
	address street city state code phone email name ship bill reference page report summary delivery
	station train model server request latency window river garden market paper letter north south east
	west blue green red yellow black white small large quick brown fox jumps over lazy dog water stone
	light night morning evening winter summer autumn spring office table chair window door house road
	bridge tower field forest mountain valley island coast harbor market school library museum theater
	Monday Friday January March August October London Paris Berlin Madrid Oslo Tokyo Sydney Boston`)

// token draws one word, number, date, price or code.
func token(rng *rand.Rand) string {
	switch r := rng.IntN(10); {
	case r < 6:
		w := words[rng.IntN(len(words))]
		if rng.IntN(4) == 0 {
			w = strings.ToUpper(w[:1]) + w[1:]
		}
		return w
	case r == 6:
		return strconv.Itoa(rng.IntN(100000))
	case r == 7:
		return fmt.Sprintf("%04d-%02d-%02d", 1990+rng.IntN(40), 1+rng.IntN(12), 1+rng.IntN(28))
	case r == 8:
		return fmt.Sprintf("$%d.%02d", rng.IntN(1000), rng.IntN(100))
	default:
		return fmt.Sprintf("%c%c-%d", 'A'+rune(rng.IntN(26)), 'A'+rune(rng.IntN(26)), 100+rng.IntN(900))
	}
}

// Generate renders n document-like images from seed: 1-8 lines of random words and numbers in one of the fonts, at
// sizes from 11 to 32 pixels, dark on a light background of varying contrast, with noise, some slightly rotated or
// blurred. The same seed and fonts give the
// same images and labels.
func Generate(n int, seed uint64, fonts []Font) ([]*image.RGBA, []Document, error) {
	if len(fonts) == 0 {
		return nil, nil, fmt.Errorf("ocr: no fonts")
	}
	imgs := make([]*image.RGBA, n)
	docs := make([]Document, n)
	for i := 0; i < n; i++ {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		img, doc, err := generateOne(rng, fonts)
		if err != nil {
			return nil, nil, err
		}
		doc.File = fmt.Sprintf("images/%05d.png", i)
		imgs[i], docs[i] = img, doc
	}
	return imgs, docs, nil
}

func generateOne(rng *rand.Rand, fonts []Font) (*image.RGBA, Document, error) {
	f := fonts[rng.IntN(len(fonts))]
	size := 11 + rng.Float64()*21
	face, err := opentype.NewFace(f.font, &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingNone})
	if err != nil {
		return nil, Document{}, err
	}
	defer face.Close()
	w := 480 + rng.IntN(320)
	nLines := 1 + rng.IntN(8)
	margin := 16 + rng.IntN(40)
	spacing := size * (1.5 + rng.Float64()*0.8)
	h := int(float64(2*margin) + spacing*float64(nLines))
	bg := uint8(175 + rng.IntN(80))
	fg := uint8(rng.IntN(110))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.RGBA{bg, bg, bg - uint8(rng.IntN(12)), 255}), image.Point{}, draw.Src)
	d := &font.Drawer{Dst: img, Src: image.NewUniform(color.RGBA{fg, fg, fg, 255}), Face: face}
	doc := Document{Width: w, Height: h, Font: f.Name}
	for l := 0; l < nLines; l++ {
		// Tokens until the line would overflow; at least one.
		maxW := fixed.I(w - 2*margin - rng.IntN(w/3))
		text := token(rng)
		for k := rng.IntN(4); k > 0; k-- {
			next := text + " " + token(rng)
			if d.MeasureString(next) > maxW {
				break
			}
			text = next
		}
		x := margin + rng.IntN(1+max(0, w-2*margin-d.MeasureString(text).Ceil()))
		base := float64(margin) + spacing*float64(l) + size
		d.Dot = fixed.Point26_6{X: fixed.I(x), Y: fixed.Int26_6(base * 64)}
		b, _ := d.BoundString(text)
		d.DrawString(text)
		doc.Lines = append(doc.Lines, Line{Text: text, Box: Box{
			X0: float64(b.Min.X) / 64, Y0: float64(b.Min.Y) / 64, X1: float64(b.Max.X) / 64, Y1: float64(b.Max.Y) / 64,
		}})
	}
	if rng.IntN(3) == 0 {
		img, doc.Lines = rotate(img, doc.Lines, (rng.Float64()*2-1)*2.0, color.RGBA{bg, bg, bg, 255})
	}
	if rng.IntN(3) == 0 {
		blur(img)
	}
	addNoise(img, rng, rng.Float64()*20)
	return img, doc, nil
}

// rotate turns the image by deg degrees about its centre and the line boxes with it (to the axis-aligned bounds of
// the turned box).
func rotate(src *image.RGBA, lines []Line, deg float64, bg color.RGBA) (*image.RGBA, []Line) {
	dst := image.NewRGBA(src.Bounds())
	draw.Draw(dst, dst.Bounds(), image.NewUniform(bg), image.Point{}, draw.Src)
	th := deg * math.Pi / 180
	c, s := math.Cos(th), math.Sin(th)
	cx, cy := float64(src.Bounds().Dx())/2, float64(src.Bounds().Dy())/2
	// Maps source to destination coordinates.
	m := f64.Aff3{c, -s, cx - c*cx + s*cy, s, c, cy - s*cx - c*cy}
	draw.BiLinear.Transform(dst, m, src, src.Bounds(), draw.Over, nil)
	out := make([]Line, len(lines))
	for i, l := range lines {
		b := Box{X0: math.Inf(1), Y0: math.Inf(1), X1: math.Inf(-1), Y1: math.Inf(-1)}
		for _, p := range [][2]float64{{l.Box.X0, l.Box.Y0}, {l.Box.X1, l.Box.Y0}, {l.Box.X0, l.Box.Y1}, {l.Box.X1, l.Box.Y1}} {
			x := m[0]*p[0] + m[1]*p[1] + m[2]
			y := m[3]*p[0] + m[4]*p[1] + m[5]
			b.X0, b.Y0, b.X1, b.Y1 = math.Min(b.X0, x), math.Min(b.Y0, y), math.Max(b.X1, x), math.Max(b.Y1, y)
		}
		out[i] = Line{Text: l.Text, Box: b}
	}
	return dst, out
}

// blur is a 3x3 box blur, like a slightly out-of-focus scan.
func blur(img *image.RGBA) {
	src := append([]uint8(nil), img.Pix...)
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	for y := 1; y < h-1; y++ {
		for x := 1; x < w-1; x++ {
			for c := 0; c < 3; c++ {
				sum := 0
				for dy := -1; dy <= 1; dy++ {
					for dx := -1; dx <= 1; dx++ {
						sum += int(src[(y+dy)*img.Stride+4*(x+dx)+c])
					}
				}
				img.Pix[y*img.Stride+4*x+c] = uint8(sum / 9)
			}
		}
	}
}

func addNoise(img *image.RGBA, rng *rand.Rand, sigma float64) {
	if sigma < 0.5 {
		return
	}
	for i := 0; i < len(img.Pix); i += 4 {
		n := rng.NormFloat64() * sigma
		for c := 0; c < 3; c++ {
			img.Pix[i+c] = uint8(math.Max(0, math.Min(255, float64(img.Pix[i+c])+n)))
		}
	}
}

// WriteSet generates a set of n images into dir: the PNGs under dir/images and the ground truth in dir/labels.json.
func WriteSet(dir string, n int, seed uint64, fonts []Font) (*Set, error) {
	imgs, docs, err := Generate(n, seed, fonts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		return nil, err
	}
	for i, img := range imgs {
		f, err := os.Create(filepath.Join(dir, docs[i].File))
		if err != nil {
			return nil, err
		}
		err = png.Encode(f, img)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
	}
	set := &Set{Seed: seed, Documents: docs, dir: dir}
	for _, f := range fonts {
		set.Fonts = append(set.Fonts, f.Name)
	}
	b, err := json.MarshalIndent(set, "", " ")
	if err != nil {
		return nil, err
	}
	return set, os.WriteFile(filepath.Join(dir, LabelsFile), b, 0o644)
}

// ReadSet reads the labelled set in dir.
func ReadSet(dir string) (*Set, error) {
	b, err := os.ReadFile(filepath.Join(dir, LabelsFile))
	if err != nil {
		return nil, fmt.Errorf("labelled set: %w (generate one with `make data`)", err)
	}
	var s Set
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, LabelsFile), err)
	}
	if len(s.Documents) == 0 {
		return nil, fmt.Errorf("%s: no documents", filepath.Join(dir, LabelsFile))
	}
	s.dir = dir
	return &s, nil
}

// ImageBytes reads the encoded image of document i.
func (s *Set) ImageBytes(i int) ([]byte, error) {
	return os.ReadFile(filepath.Join(s.dir, s.Documents[i].File))
}
