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
	"image/color"
	"math"
	"strings"
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
