package plot

import (
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"sync"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// WritePNG writes the figure as PNG.
func (f *Figure) WritePNG(w io.Writer) error {
	regular, bold, err := faces()
	if err != nil {
		return err
	}
	img := image.NewRGBA(image.Rect(0, 0, width, f.height()))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	grey, light, markC := color.RGBA{136, 136, 136, 255}, color.RGBA{221, 221, 221, 255}, color.RGBA{85, 85, 85, 255}
	keys, st := f.styles()
	text(img, bold.title, marginLeft, 22, f.Title, color.Black)
	for i, k := range keys {
		x, y := legendAt(i)
		polyline(img, [][2]float64{{x, y - 5}, {x + 36, y - 5}}, st[k])
		text(img, regular.text, int(x)+42, int(y), k, color.Black)
	}
	for i := range f.Panels {
		p := &f.Panels[i]
		fr := f.frame(i)
		text(img, bold.text, int(fr.x0), int(fr.y0)-8, p.Title, color.Black)
		ts, labels := p.yTicks(fr.ylo, fr.yhi)
		for j, t := range ts {
			_, y := fr.px(fr.xlo, t)
			polyline(img, [][2]float64{{fr.x0, y}, {fr.x0 + fr.w, y}}, style{color: light, width: 1})
			text(img, regular.text, int(fr.x0)-6-textWidth(regular.text, labels[j]), int(y)+5, labels[j], color.Black)
		}
		for _, m := range f.Marks {
			x, _ := fr.px(m.X, fr.ylo)
			polyline(img, [][2]float64{{x, fr.y0}, {x, fr.y0 + fr.h}}, style{color: markC, width: 1, dash: []float64{2, 3}})
			if i == 0 && m.Label != "" {
				text(img, regular.small, int(x)-textWidth(regular.small, m.Label)/2, int(fr.y0)+12, m.Label, markC)
			}
		}
		box := [][2]float64{{fr.x0, fr.y0}, {fr.x0 + fr.w, fr.y0}, {fr.x0 + fr.w, fr.y0 + fr.h}, {fr.x0, fr.y0 + fr.h}, {fr.x0, fr.y0}}
		polyline(img, box, style{color: grey, width: 1})
		if i == len(f.Panels)-1 {
			for _, t := range ticks(fr.xlo, fr.xhi, 8) {
				x, _ := fr.px(t, fr.ylo)
				s := label(t)
				text(img, regular.text, int(x)-textWidth(regular.text, s)/2, int(fr.y0+fr.h)+18, s, color.Black)
			}
			text(img, regular.text, int(fr.x0+fr.w/2)-textWidth(regular.text, f.XLabel)/2, int(fr.y0+fr.h)+38, f.XLabel, color.Black)
		}
		verticalText(img, regular.text, 4, int(fr.y0+fr.h/2), p.YLabel)
		for si := range p.Series {
			s := &p.Series[si]
			for _, run := range fr.runs(s) {
				polyline(img, run, st[s.key()])
			}
		}
	}
	return png.Encode(w, img)
}

type faceSet struct{ text, small, title font.Face }

var (
	facesOnce           sync.Once
	regularSet, boldSet faceSet
	facesErr            error
)

// faces are the Go fonts (golang.org/x/image, BSD licence), parsed once.
func faces() (regular, bold faceSet, err error) {
	facesOnce.Do(func() {
		set := func(ttf []byte) (faceSet, error) {
			f, err := opentype.Parse(ttf)
			if err != nil {
				return faceSet{}, err
			}
			var fs faceSet
			for _, x := range []struct {
				face *font.Face
				size float64
			}{{&fs.text, fontSize}, {&fs.small, fontSize - 2}, {&fs.title, titleSize}} {
				if *x.face, err = opentype.NewFace(f, &opentype.FaceOptions{Size: x.size, DPI: 72, Hinting: font.HintingFull}); err != nil {
					return faceSet{}, err
				}
			}
			return fs, nil
		}
		if regularSet, facesErr = set(goregular.TTF); facesErr == nil {
			boldSet, facesErr = set(gobold.TTF)
		}
	})
	return regularSet, boldSet, facesErr
}

func text(img draw.Image, face font.Face, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func textWidth(face font.Face, s string) int { return font.MeasureString(face, s).Round() }

// verticalText draws s rotated a quarter turn anticlockwise, centred on y, its top at x.
func verticalText(img *image.RGBA, face font.Face, x, y int, s string) {
	w := textWidth(face, s)
	m := face.Metrics()
	h := (m.Ascent + m.Descent).Ceil()
	tmp := image.NewRGBA(image.Rect(0, 0, w, h))
	text(tmp, face, 0, m.Ascent.Ceil(), s, color.Black)
	for ty := 0; ty < h; ty++ {
		for tx := 0; tx < w; tx++ {
			if c := tmp.RGBAAt(tx, ty); c.A > 0 {
				// Anticlockwise: the text's x runs up the image, its y runs right.
				px, py := x+ty, y+w/2-tx
				img.Set(px, py, blend(img.RGBAAt(px, py), c))
			}
		}
	}
}

// blend draws the premultiplied colour c over dst.
func blend(dst, c color.RGBA) color.RGBA {
	a := 255 - uint32(c.A)
	return color.RGBA{uint8(uint32(c.R) + uint32(dst.R)*a/255), uint8(uint32(c.G) + uint32(dst.G)*a/255),
		uint8(uint32(c.B) + uint32(dst.B)*a/255), 255}
}

// polyline draws connected segments with a square pen of s's width, dashed as s says: the dash pattern runs on
// across segments, so a line of many short segments is dashed as one.
func polyline(img *image.RGBA, pts [][2]float64, s style) {
	period := 0.0
	for _, d := range s.dash {
		period += d
	}
	along := 0.0
	on := func() bool {
		if period == 0 {
			return true
		}
		p := math.Mod(along, period)
		for i, d := range s.dash {
			if p < d {
				return i%2 == 0
			}
			p -= d
		}
		return true
	}
	half := s.width / 2
	dot := func(x, y float64) {
		for yy := int(math.Round(y - half)); yy < int(math.Round(y+half)); yy++ {
			for xx := int(math.Round(x - half)); xx < int(math.Round(x+half)); xx++ {
				img.SetRGBA(xx, yy, s.color)
			}
		}
	}
	if len(pts) == 1 {
		dot(pts[0][0], pts[0][1])
	}
	for i := 1; i < len(pts); i++ {
		x0, y0, x1, y1 := pts[i-1][0], pts[i-1][1], pts[i][0], pts[i][1]
		n := int(math.Ceil(math.Hypot(x1-x0, y1-y0) * 2)) // half-pixel steps
		for k := 0; k <= n; k++ {
			t := 0.0
			if n > 0 {
				t = float64(k) / float64(n)
			}
			if on() {
				dot(x0+(x1-x0)*t, y0+(y1-y0)*t)
			}
			if k < n {
				along += math.Hypot(x1-x0, y1-y0) / float64(n)
			}
		}
	}
}
