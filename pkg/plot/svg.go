package plot

import (
	"fmt"
	"io"
	"strings"
)

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
