// Package plot draws line charts as SVG and PNG: one figure of stacked panels sharing the x axis, one line per
// series, like the time-series figures of the Loki paper. Small and dependency-light on purpose: the reports of
// the simulator need nothing more.
//
// Made to be read: a series keeps its colour and line style in every panel (its Key), one legend for the figure
// sits above the panels (never over data), lines drawn later are thinner and dashed, so a line equal to an earlier
// one shows both, and a panel may have a logarithmic y axis, so that 0.2% and 2.5% do not both lie on the floor.
package plot

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strings"
	"sync"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// Series is one line.
type Series struct {
	Name string
	// Key names what the line stands for (a system); lines of the same key have the same style in every panel and
	// one entry in the legend. Empty: the Name.
	Key  string
	X, Y []float64
}

func (s *Series) key() string {
	if s.Key != "" {
		return s.Key
	}
	return s.Name
}

// Panel is one chart of the figure.
type Panel struct {
	Title  string
	YLabel string
	// YMin and YMax fix the y range when YMax > YMin; otherwise it fits the data (from 0 when all are positive).
	YMin, YMax float64
	// LogY makes the y axis logarithmic, from YMin (which must then be positive) to YMax: values at or under YMin,
	// zero included, are drawn on the floor, labelled "≤YMin".
	LogY bool
	// Height in pixels (0: the default, 190).
	Height int
	Series []Series
}

func (p *Panel) height() int {
	if p.Height > 0 {
		return p.Height
	}
	return panelHeight
}

// Mark is a dotted vertical line across every panel at X (in the paper, a switch between hardware and accuracy
// scaling), labelled at the top.
type Mark struct {
	X     float64
	Label string
}

// Figure is panels stacked vertically over a shared x axis.
type Figure struct {
	Title  string
	XLabel string
	Panels []Panel
	Marks  []Mark
}

// Layout, in pixels.
const (
	width       = 1000
	panelHeight = 190
	marginLeft  = 78
	marginRight = 20
	titleHeight = 34
	legendRow   = 24
	gap         = 48
	marginBot   = 48
	fontSize    = 14
	titleSize   = 18
	legendItem  = 220 // width of one legend entry
)

// palette is colour-blind friendly (Okabe-Ito), black first: the first key is usually the reference (the workload).
var palette = []color.RGBA{
	{0, 0, 0, 255}, {0, 114, 178, 255}, {213, 94, 0, 255}, {0, 158, 115, 255}, {204, 121, 167, 255},
	{230, 159, 0, 255}, {86, 180, 233, 255}, {120, 120, 120, 255},
}

// dashes are the line styles, in the order keys get them: on and off lengths in pixels; nil is solid.
var dashes = [][]float64{nil, {10, 5}, {3, 4}, {12, 4, 3, 4}}

// style is how one key's lines are drawn.
type style struct {
	color color.RGBA
	dash  []float64
	width float64
}

// styles gives each key, in the order of first appearance, a colour and a line style; later keys are thinner, so a
// line drawn over an equal one leaves the earlier visible.
func (f *Figure) styles() (keys []string, by map[string]style) {
	by = map[string]style{}
	for _, p := range f.Panels {
		for _, s := range p.Series {
			k := s.key()
			if _, ok := by[k]; ok {
				continue
			}
			i := len(keys)
			keys = append(keys, k)
			by[k] = style{color: palette[i%len(palette)], dash: dashes[i%len(dashes)], width: max(1.5, 4-0.8*float64(i))}
		}
	}
	return keys, by
}

func (f *Figure) legendRows() int {
	keys, _ := f.styles()
	perRow := max(1, (width-marginLeft-marginRight)/legendItem)
	return (len(keys) + perRow - 1) / perRow
}

func (f *Figure) top() int { return titleHeight + f.legendRows()*legendRow + 24 }

func (f *Figure) height() int {
	h := f.top() - gap + marginBot
	for i := range f.Panels {
		h += f.Panels[i].height() + gap
	}
	return h
}

// xRange is the x extent of every series of every panel.
func (f *Figure) xRange() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, p := range f.Panels {
		for _, s := range p.Series {
			for _, x := range s.X {
				lo, hi = min(lo, x), max(hi, x)
			}
		}
	}
	if lo >= hi {
		lo, hi = 0, max(1, hi)
	}
	return lo, hi
}

func (p *Panel) yRange() (lo, hi float64) {
	if p.YMax > p.YMin {
		return p.YMin, p.YMax
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range p.Series {
		for _, y := range s.Y {
			if !math.IsNaN(y) {
				lo, hi = min(lo, y), max(hi, y)
			}
		}
	}
	if math.IsInf(lo, 1) {
		return 0, 1
	}
	if lo >= 0 {
		lo = 0
	}
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi + (hi-lo)*0.05
}

// ticks returns at least n round values (1, 2 or 5 times a power of ten apart) covering [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{2, 5} {
		if m*mag <= raw {
			step = m * mag
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

// logTicks are the powers of ten in [lo, hi].
func logTicks(lo, hi float64) []float64 {
	var out []float64
	for e := math.Ceil(math.Log10(lo) - 1e-9); e <= math.Log10(hi)+1e-9; e++ {
		out = append(out, math.Pow(10, e))
	}
	return out
}

func label(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e6 {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", v), "0"), ".")
}

// yTicks are the panel's y ticks and their labels.
func (p *Panel) yTicks(lo, hi float64) ([]float64, []string) {
	var ts []float64
	if p.LogY {
		ts = logTicks(lo, hi)
	} else {
		ts = ticks(lo, hi, 4)
	}
	labels := make([]string, len(ts))
	for i, t := range ts {
		labels[i] = label(t)
		if p.LogY && t <= lo*(1+1e-9) {
			labels[i] = "≤" + labels[i]
		}
	}
	return ts, labels
}

// frame maps data to pixels for one panel.
type frame struct {
	x0, y0, w, h       float64
	xlo, xhi, ylo, yhi float64
	log                bool
}

func (f *Figure) frame(i int) frame {
	xlo, xhi := f.xRange()
	p := &f.Panels[i]
	ylo, yhi := p.yRange()
	y0 := f.top()
	for j := range i {
		y0 += f.Panels[j].height() + gap
	}
	return frame{x0: marginLeft, y0: float64(y0), w: width - marginLeft - marginRight,
		h: float64(p.height()), xlo: xlo, xhi: xhi, ylo: ylo, yhi: yhi, log: p.LogY && ylo > 0}
}

// px maps a point to pixels; y is clamped to the panel.
func (fr frame) px(x, y float64) (float64, float64) {
	y = max(fr.ylo, min(fr.yhi, y))
	t := (y - fr.ylo) / (fr.yhi - fr.ylo)
	if fr.log {
		t = math.Log(y/fr.ylo) / math.Log(fr.yhi/fr.ylo)
	}
	return fr.x0 + (x-fr.xlo)/(fr.xhi-fr.xlo)*fr.w, fr.y0 + fr.h - t*fr.h
}

// runs are the series' points in pixels, split where a value is missing.
func (fr frame) runs(s *Series) [][][2]float64 {
	var out [][][2]float64
	var cur [][2]float64
	for k := range s.X {
		if k >= len(s.Y) || math.IsNaN(s.Y[k]) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		x, y := fr.px(s.X[k], s.Y[k])
		cur = append(cur, [2]float64{x, y})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// legendAt is where legend entry i starts (the line sample's left end and the text's baseline).
func legendAt(i int) (x, y float64) {
	perRow := max(1, (width-marginLeft-marginRight)/legendItem)
	return float64(marginLeft + (i%perRow)*legendItem), float64(titleHeight + (i/perRow)*legendRow + 14)
}

// WriteSVG writes the figure as SVG.
func (f *Figure) WriteSVG(w io.Writer) error {
	var b strings.Builder
	h := f.height()
	keys, st := f.styles()
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="%d">`+"\n", width, h, width, h, fontSize)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="%d" font-weight="bold">%s</text>`+"\n", marginLeft, titleSize, esc(f.Title))
	stroke := func(s style) string {
		a := fmt.Sprintf(`stroke="rgb(%d,%d,%d)" stroke-width="%g"`, s.color.R, s.color.G, s.color.B, s.width)
		if s.dash != nil {
			a += fmt.Sprintf(` stroke-dasharray="%s"`, strings.Trim(fmt.Sprint(s.dash), "[]"))
		}
		return a
	}
	for i, k := range keys {
		x, y := legendAt(i)
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" %s/>`, x, y-5, x+36, y-5, stroke(st[k]))
		fmt.Fprintf(&b, `<text x="%g" y="%g">%s</text>`+"\n", x+42, y, esc(k))
	}
	for i := range f.Panels {
		p := &f.Panels[i]
		fr := f.frame(i)
		fmt.Fprintf(&b, `<text x="%g" y="%g" font-weight="bold">%s</text>`+"\n", fr.x0, fr.y0-8, esc(p.Title))
		ts, labels := p.yTicks(fr.ylo, fr.yhi)
		for j, t := range ts {
			_, y := fr.px(fr.xlo, t)
			fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`, fr.x0, y, fr.x0+fr.w, y)
			fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n", fr.x0-6, y+5, esc(labels[j]))
		}
		for _, m := range f.Marks {
			x, _ := fr.px(m.X, fr.ylo)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#555" stroke-dasharray="2 3"/>`, x, fr.y0, x, fr.y0+fr.h)
			if i == 0 && m.Label != "" {
				fmt.Fprintf(&b, `<text x="%.1f" y="%g" font-size="%d" text-anchor="middle" fill="#555">%s</text>`, x, fr.y0+12, fontSize-2, esc(m.Label))
			}
		}
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#888"/>`+"\n", fr.x0, fr.y0, fr.w, fr.h)
		if i == len(f.Panels)-1 {
			for _, t := range ticks(fr.xlo, fr.xhi, 8) {
				x, _ := fr.px(t, fr.ylo)
				fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`, x, fr.y0+fr.h+18, label(t))
			}
			fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", fr.x0+fr.w/2, fr.y0+fr.h+38, esc(f.XLabel))
		}
		fmt.Fprintf(&b, `<text transform="translate(16,%g) rotate(-90)" text-anchor="middle">%s</text>`+"\n", fr.y0+fr.h/2, esc(p.YLabel))
		for si := range p.Series {
			s := &p.Series[si]
			for _, run := range fr.runs(s) {
				var pts strings.Builder
				for _, pt := range run {
					fmt.Fprintf(&pts, "%.1f,%.1f ", pt[0], pt[1])
				}
				fmt.Fprintf(&b, `<polyline fill="none" %s points="%s"><title>%s</title></polyline>`+"\n", stroke(st[s.key()]), pts.String(), esc(s.Name))
			}
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

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
