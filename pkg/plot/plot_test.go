package plot

import (
	"bytes"
	"image/png"
	"math"
	"strings"
	"testing"
)

func TestFigure(t *testing.T) {
	f := &Figure{Title: "t <&>", XLabel: "time (s)", Panels: []Panel{
		{Title: "a", YLabel: "QPS", Series: []Series{{Name: "x", X: []float64{0, 1, 2}, Y: []float64{1, 5, 3}}}},
		{Title: "b", YLabel: "ratio", YMin: 0, YMax: 1, Series: []Series{
			{Name: "y", X: []float64{0, 1, 2}, Y: []float64{0.1, math.NaN(), 2}},
			{Name: "z", X: []float64{0, 1, 2}, Y: []float64{0, 0, 0}}}},
	}}
	var svg bytes.Buffer
	if err := f.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	s := svg.String()
	// y's missing value breaks its line in two: a gap, not a line drawn across it.
	if strings.Count(s, "<polyline") != 4 || !strings.Contains(s, "t &lt;&amp;&gt;") {
		t.Fatalf("svg: %d lines, title escaped: %v", strings.Count(s, "<polyline"), strings.Contains(s, "&lt;"))
	}
	var p bytes.Buffer
	if err := f.WritePNG(&p); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&p)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != width || b.Dy() != f.height() {
		t.Fatalf("png %v", b)
	}
}

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []float64
	}{{0, 1, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}}, {0, 900, []float64{0, 200, 400, 600, 800}}, {0, 20, []float64{0, 5, 10, 15, 20}}} {
		got := ticks(tc.lo, tc.hi, 4)
		if len(got) != len(tc.want) {
			t.Errorf("ticks(%v, %v) = %v, want %v", tc.lo, tc.hi, got, tc.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("ticks(%v, %v) = %v, want %v", tc.lo, tc.hi, got, tc.want)
			}
		}
	}
}

// TestKeysKeepTheirStyle: a system's lines look the same in every panel, whatever other lines a panel has before
// them, and no two keys look alike.
func TestKeysKeepTheirStyle(t *testing.T) {
	x := []float64{0, 1}
	f := &Figure{Panels: []Panel{
		{Series: []Series{{Name: "workload", X: x, Y: x}, {Name: "a estimate", Key: "a", X: x, Y: x}, {Name: "b estimate", Key: "b", X: x, Y: x}}},
		{Series: []Series{{Name: "a", X: x, Y: x}, {Name: "b", X: x, Y: x}}},
	}}
	keys, st := f.styles()
	if strings.Join(keys, ",") != "workload,a,b" {
		t.Fatalf("keys %v", keys)
	}
	for i, k := range keys {
		for _, l := range keys[i+1:] {
			if st[k].color == st[l].color {
				t.Errorf("%s and %s share a colour", k, l)
			}
			if st[k].width <= st[l].width {
				t.Errorf("%s (drawn first) is not wider than %s, which would hide it where they are equal", k, l)
			}
		}
	}
	var svg bytes.Buffer
	if err := f.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	// Every polyline of a key has the key's one stroke.
	strokes := map[string]map[string]bool{}
	for _, line := range strings.Split(svg.String(), "\n") {
		if !strings.HasPrefix(line, "<polyline") {
			continue
		}
		name := line[strings.Index(line, "<title>")+7 : strings.Index(line, "</title>")]
		key := strings.TrimSuffix(name, " estimate")
		stroke := line[strings.Index(line, "stroke="):strings.Index(line, " points=")]
		if strokes[key] == nil {
			strokes[key] = map[string]bool{}
		}
		strokes[key][stroke] = true
	}
	for k, s := range strokes {
		if len(s) != 1 {
			t.Errorf("%s is drawn %d ways: %v", k, len(s), s)
		}
	}
}

// TestLogAxis: on a log axis 0.2% and 2.5% are a decade apart (on a linear 0-100 axis they were a pixel apart), and
// zero lies on the floor.
func TestLogAxis(t *testing.T) {
	f := &Figure{Panels: []Panel{{LogY: true, YMin: 0.01, YMax: 100,
		Series: []Series{{Name: "v", X: []float64{0, 1}, Y: []float64{0, 1}}}}}}
	fr := f.frame(0)
	_, y0 := fr.px(0, 0)
	_, yFloor := fr.px(0, 0.01)
	_, ySmall := fr.px(0, 0.2)
	_, yBig := fr.px(0, 2.5)
	_, yTop := fr.px(0, 100)
	if y0 != yFloor || math.Abs(yTop-fr.y0) > 1e-9 {
		t.Errorf("zero at %v, floor at %v, 100 at %v (panel top %v)", y0, yFloor, yTop, fr.y0)
	}
	if d := ySmall - yBig; d < fr.h/4*0.9 { // 0.2 -> 2.5 is 1.1 of the axis' 4 decades
		t.Errorf("0.2 and 2.5 are %v pixels apart on a %v-pixel axis", d, fr.h)
	}
	ts, labels := f.Panels[0].yTicks(fr.ylo, fr.yhi)
	if len(ts) != 5 || labels[0] != "≤0.01" || labels[4] != "100" {
		t.Errorf("ticks %v %v", ts, labels)
	}
}

// TestLegendAbovePanels: the legend never covers data: every entry lies above the first panel.
func TestLegendAbovePanels(t *testing.T) {
	var series []Series
	for i := range 9 {
		series = append(series, Series{Name: strings.Repeat("s", i+1), X: []float64{0, 1}, Y: []float64{0, 1}})
	}
	f := &Figure{Panels: []Panel{{Series: series}}}
	_, y := legendAt(8)
	if top := f.frame(0).y0; y+6 >= top-20 { // the panel's title sits above its frame
		t.Errorf("the last legend entry at y %v reaches the first panel (top %v)", y, top)
	}
}
