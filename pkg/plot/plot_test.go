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
	if strings.Count(s, "<polyline") != 3 || !strings.Contains(s, "t &lt;&amp;&gt;") {
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
