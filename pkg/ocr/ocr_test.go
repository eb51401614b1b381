package ocr

import (
	"math"
	"reflect"
	"testing"
)

func TestDecodeCTC(t *testing.T) {
	// Classes: 0 blank, then "ab " as a tiny charset.
	cs := []rune("ab ")
	step := func(k int) []float32 {
		row := make([]float32, 4)
		row[k] = 0.9
		for j := range row {
			if j != k {
				row[j] = 0.1 / 3
			}
		}
		return row
	}
	tests := []struct {
		steps []int
		want  string
	}{
		{[]int{0, 0, 0}, ""},
		{[]int{1, 1, 2}, "ab"},        // a repeat collapses
		{[]int{1, 0, 1}, "aa"},        // a blank separates a double letter
		{[]int{3, 1, 3, 2, 3}, "a b"}, // spaces inside kept, at the ends trimmed
	}
	for _, tc := range tests {
		var probs []float32
		for _, k := range tc.steps {
			probs = append(probs, step(k)...)
		}
		got, conf := DecodeCTC(probs, len(tc.steps), 4, cs)
		if got != tc.want {
			t.Errorf("DecodeCTC(%v) = %q, want %q", tc.steps, got, tc.want)
		}
		if tc.want != "" && math.Abs(conf-0.9) > 1e-6 {
			t.Errorf("DecodeCTC(%v) confidence %g, want 0.9", tc.steps, conf)
		}
	}
	if len(EnglishCharset) != 96 {
		t.Errorf("EnglishCharset has %d characters; the English recognisers have 97 classes (blank + 96)", len(EnglishCharset))
	}
}

func TestCharAccuracy(t *testing.T) {
	tests := []struct {
		got, truth string
		want       float64
	}{
		{"hello", "hello", 1},
		{"helo", "hello", 0.8},
		{"", "hello", 0},
		{"completely different and longer", "abc", 0},
		{"", "", 1},
		{"x", "", 0},
	}
	for _, tc := range tests {
		if got := CharAccuracy(tc.got, tc.truth); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("CharAccuracy(%q, %q) = %g, want %g", tc.got, tc.truth, got, tc.want)
		}
	}
	if d := EditDistance("kitten", "sitting"); d != 3 {
		t.Errorf("EditDistance(kitten, sitting) = %d, want 3", d)
	}
}

// TestTextBoxes draws two text regions on a probability map: both come back as boxes in reading order, grown by
// DB's unclipping and scaled back to the image; a faint region and a speck do not.
func TestTextBoxes(t *testing.T) {
	const size = 64
	prob := make([]float32, size*size)
	fill := func(x0, y0, x1, y1 int, p float32) {
		for y := y0; y < y1; y++ {
			for x := x0; x < x1; x++ {
				prob[y*size+x] = p
			}
		}
	}
	fill(10, 30, 50, 36, 0.9) // second line
	fill(4, 10, 40, 16, 0.95) // first line
	fill(10, 50, 30, 56, 0.4) // above the pixel threshold, below the box threshold
	fill(60, 2, 61, 3, 0.9)   // a one-pixel speck, under MinSize
	boxes := TextBoxes(prob, size, 0.5, 128, 128, DefaultDB)
	if len(boxes) < 2 {
		t.Fatalf("got %d boxes %v, want the two lines", len(boxes), boxes)
	}
	// First line: 36 x 6 pixels, grown by 36*6*1.5/(2*42) = 3.857 on every side, then scaled by 1/0.5.
	d := 36.0 * 6 * 1.5 / (2 * 42)
	want := Box{X0: (4 - d) * 2, Y0: (10 - d) * 2, X1: (40 + d) * 2, Y1: (16 + d) * 2}
	if b := boxes[0]; math.Abs(b.X0-want.X0) > 1e-9 || math.Abs(b.Y1-want.Y1) > 1e-9 {
		t.Errorf("first box %v, want %v", b, want)
	}
	if boxes[1].Y0 < boxes[0].Y1 {
		t.Errorf("boxes not in reading order: %v", boxes)
	}
	if len(boxes) != 2 {
		t.Errorf("got %d boxes %v: the faint region or the speck came back", len(boxes), boxes)
	}
}

func TestMatchLinesAndScorePage(t *testing.T) {
	truth := []Line{
		{Text: "first line", Box: Box{10, 10, 110, 30}},
		{Text: "second", Box: Box{10, 50, 70, 70}},
		{Text: "third", Box: Box{10, 90, 60, 110}},
	}
	reads := []Read{
		{Box: Box{12, 52, 72, 72}, Text: "second"},    // found, read right
		{Box: Box{8, 8, 112, 32}, Text: "first lime"}, // found, one character wrong
		{Box: Box{200, 200, 220, 220}, Text: "noise"}, // a false detection
	}
	boxes := []Box{reads[0].Box, reads[1].Box, reads[2].Box}
	if got := MatchLines(boxes, truth); !reflect.DeepEqual(got, []int{1, 0, -1}) {
		t.Errorf("MatchLines = %v, want [1 0 -1]", got)
	}
	s := ScorePage(reads, truth)
	if s.Found != 2 || s.ExactLines != 1 || s.Detected != 3 || s.Lines != 3 {
		t.Errorf("ScorePage = %+v", s)
	}
	if got, want := PageText(reads), "first lime\nsecond\nnoise"; got != want {
		t.Errorf("PageText = %q, want %q", got, want)
	}
}

func TestGenerateIsSeededAndLabelled(t *testing.T) {
	fonts, err := LoadFonts("")
	if err != nil {
		t.Fatal(err)
	}
	imgs, docs, err := Generate(12, 3, fonts)
	if err != nil {
		t.Fatal(err)
	}
	_, again, _ := Generate(12, 3, fonts)
	if !reflect.DeepEqual(docs, again) {
		t.Error("the same seed gave different labels")
	}
	_, other, _ := Generate(12, 4, fonts)
	if reflect.DeepEqual(docs, other) {
		t.Error("another seed gave the same labels")
	}
	for i, d := range docs {
		if n := len(d.Lines); n < 1 || n > 8 {
			t.Errorf("document %d has %d lines, want 1 to 8", i, n)
		}
		b := imgs[i].Bounds()
		for _, l := range d.Lines {
			if l.Text == "" || l.Box.X0 < 0 || l.Box.Y0 < 0 || l.Box.X1 > float64(b.Dx()) || l.Box.Y1 > float64(b.Dy()) || l.Box.Area() <= 0 {
				t.Errorf("document %d: bad line %+v in a %dx%d image", i, l, b.Dx(), b.Dy())
			}
		}
	}
	if _, err := LoadFonts(t.TempDir()); err == nil {
		t.Error("LoadFonts of a directory without DejaVu succeeded")
	}
}

func TestWriteReadSet(t *testing.T) {
	fonts, _ := LoadFonts("")
	dir := t.TempDir()
	if _, err := WriteSet(dir, 3, 1, fonts); err != nil {
		t.Fatal(err)
	}
	s, err := ReadSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Documents) != 3 {
		t.Fatalf("read %d documents, want 3", len(s.Documents))
	}
	for i := range s.Documents {
		if b, err := s.ImageBytes(i); err != nil || len(b) == 0 {
			t.Errorf("image %d: %v", i, err)
		}
	}
	if _, err := ReadSet(t.TempDir()); err == nil {
		t.Error("ReadSet of an empty directory succeeded")
	}
}
