// Package plot draws line charts as SVG and PNG: one figure of stacked panels sharing the x axis, one line per
// series, like the time-series figures of the Loki paper. Small and dependency-light on purpose: the reports of
// the simulator need nothing more.
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

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Series is one line.
type Series struct {
	Name string
	X, Y []float64
}

// Panel is one chart of the figure.
type Panel struct {
	Title  string
	YLabel string
	// YMin and YMax fix the y range when YMax > YMin; otherwise it fits the data (from 0 when all are positive).
	YMin, YMax float64
	Series     []Series
}

// Figure is panels stacked vertically over a shared x axis.
type Figure struct {
	Title  string
	XLabel string
	Panels []Panel
}

// Layout, in pixels.
const (
	width       = 1000
	panelHeight = 200
	marginLeft  = 70
	marginRight = 230 // room for the legend
	marginTop   = 56
	gap         = 46
	marginBot   = 40
)

// palette is colour-blind friendly (Okabe-Ito).
var palette = []color.RGBA{
	{0, 114, 178, 255}, {213, 94, 0, 255}, {0, 158, 115, 255}, {204, 121, 167, 255},
	{230, 159, 0, 255}, {86, 180, 233, 255}, {0, 0, 0, 255}, {240, 228, 66, 255},
}

func (f *Figure) height() int {
	return marginTop + len(f.Panels)*(panelHeight+gap) - gap + marginBot
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

func label(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e6 {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

// frame maps data to pixels for one panel.
type frame struct {
	x0, y0, w, h       float64
	xlo, xhi, ylo, yhi float64
}

func (f *Figure) frame(i int) frame {
	xlo, xhi := f.xRange()
	ylo, yhi := f.Panels[i].yRange()
	return frame{x0: marginLeft, y0: float64(marginTop + i*(panelHeight+gap)), w: width - marginLeft - marginRight,
		h: panelHeight, xlo: xlo, xhi: xhi, ylo: ylo, yhi: yhi}
}

func (fr frame) px(x, y float64) (float64, float64) {
	return fr.x0 + (x-fr.xlo)/(fr.xhi-fr.xlo)*fr.w, fr.y0 + fr.h - (y-fr.ylo)/(fr.yhi-fr.ylo)*fr.h
}

// WriteSVG writes the figure as SVG.
func (f *Figure) WriteSVG(w io.Writer) error {
	var b strings.Builder
	h := f.height()
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, h, width, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", marginLeft, esc(f.Title))
	for i := range f.Panels {
		p := &f.Panels[i]
		fr := f.frame(i)
		fmt.Fprintf(&b, `<text x="%g" y="%g" font-weight="bold">%s</text>`+"\n", fr.x0, fr.y0-6, esc(p.Title))
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#888"/>`+"\n", fr.x0, fr.y0, fr.w, fr.h)
		for _, t := range ticks(fr.ylo, fr.yhi, 4) {
			_, y := fr.px(fr.xlo, t)
			fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`, fr.x0, y, fr.x0+fr.w, y)
			fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n", fr.x0-5, y+4, label(t))
		}
		if i == len(f.Panels)-1 {
			for _, t := range ticks(fr.xlo, fr.xhi, 8) {
				x, _ := fr.px(t, fr.ylo)
				fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`, x, fr.y0+fr.h+15, label(t))
			}
			fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", fr.x0+fr.w/2, fr.y0+fr.h+32, esc(f.XLabel))
		}
		fmt.Fprintf(&b, `<text transform="translate(14,%g) rotate(-90)" text-anchor="middle">%s</text>`+"\n", fr.y0+fr.h/2, esc(p.YLabel))
		for si, s := range p.Series {
			c := palette[si%len(palette)]
			var pts strings.Builder
			for k := range s.X {
				if k < len(s.Y) && !math.IsNaN(s.Y[k]) {
					x, y := fr.px(s.X[k], clamp(s.Y[k], fr.ylo, fr.yhi))
					fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
				}
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="rgb(%d,%d,%d)" stroke-width="1.5" points="%s"/>`+"\n", c.R, c.G, c.B, pts.String())
			ly := fr.y0 + 12 + float64(si)*16
			fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="rgb(%d,%d,%d)" stroke-width="3"/>`, fr.x0+fr.w+10, ly-4, fr.x0+fr.w+28, ly-4, c.R, c.G, c.B)
			fmt.Fprintf(&b, `<text x="%g" y="%g">%s</text>`+"\n", fr.x0+fr.w+33, ly, esc(s.Name))
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

func clamp(v, lo, hi float64) float64 { return max(lo, min(hi, v)) }

// WritePNG writes the figure as PNG.
func (f *Figure) WritePNG(w io.Writer) error {
	img := image.NewRGBA(image.Rect(0, 0, width, f.height()))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	grey, light := color.RGBA{136, 136, 136, 255}, color.RGBA{221, 221, 221, 255}
	text(img, marginLeft, 20, f.Title, color.Black)
	for i := range f.Panels {
		p := &f.Panels[i]
		fr := f.frame(i)
		text(img, int(fr.x0), int(fr.y0)-6, p.Title+"  ("+p.YLabel+")", color.Black)
		for _, t := range ticks(fr.ylo, fr.yhi, 4) {
			_, y := fr.px(fr.xlo, t)
			line(img, fr.x0, y, fr.x0+fr.w, y, light, 1)
			s := label(t)
			text(img, int(fr.x0)-5-7*len(s), int(y)+4, s, color.Black)
		}
		line(img, fr.x0, fr.y0, fr.x0+fr.w, fr.y0, grey, 1)
		line(img, fr.x0, fr.y0+fr.h, fr.x0+fr.w, fr.y0+fr.h, grey, 1)
		line(img, fr.x0, fr.y0, fr.x0, fr.y0+fr.h, grey, 1)
		line(img, fr.x0+fr.w, fr.y0, fr.x0+fr.w, fr.y0+fr.h, grey, 1)
		if i == len(f.Panels)-1 {
			for _, t := range ticks(fr.xlo, fr.xhi, 8) {
				x, _ := fr.px(t, fr.ylo)
				s := label(t)
				text(img, int(x)-7*len(s)/2, int(fr.y0+fr.h)+16, s, color.Black)
			}
			text(img, int(fr.x0+fr.w/2)-7*len(f.XLabel)/2, int(fr.y0+fr.h)+32, f.XLabel, color.Black)
		}
		for si, s := range p.Series {
			c := palette[si%len(palette)]
			havePrev := false
			var px, py float64
			for k := range s.X {
				if k >= len(s.Y) || math.IsNaN(s.Y[k]) {
					havePrev = false
					continue
				}
				x, y := fr.px(s.X[k], clamp(s.Y[k], fr.ylo, fr.yhi))
				if havePrev {
					line(img, px, py, x, y, c, 2)
				}
				px, py, havePrev = x, y, true
			}
			ly := fr.y0 + 12 + float64(si)*16
			line(img, fr.x0+fr.w+10, ly-4, fr.x0+fr.w+28, ly-4, c, 3)
			text(img, int(fr.x0+fr.w)+33, int(ly), s.Name, color.Black)
		}
	}
	return png.Encode(w, img)
}

func text(img draw.Image, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// line draws a line of the given thickness (Bresenham, with a square pen).
func line(img *image.RGBA, x0, y0, x1, y1 float64, c color.RGBA, thick int) {
	ax, ay, bx, by := int(math.Round(x0)), int(math.Round(y0)), int(math.Round(x1)), int(math.Round(y1))
	dx, dy := abs(bx-ax), -abs(by-ay)
	sx, sy := sign(bx-ax), sign(by-ay)
	e := dx + dy
	for {
		for i := range thick {
			for j := range thick {
				img.SetRGBA(ax+i-thick/2, ay+j-thick/2, c)
			}
		}
		if ax == bx && ay == by {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			ax += sx
		}
		if e2 <= dx {
			e += dx
			ay += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
