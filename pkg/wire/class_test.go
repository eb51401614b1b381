package wire

import "testing"

func TestVariantOnClass(t *testing.T) {
	for _, c := range []struct{ model, class, name string }{
		{"yolov5x", "", "yolov5x"},
		{"yolov5x", DefaultClass, "yolov5x"},
		{"yolov5x", "fast", "yolov5x@fast"},
	} {
		if got := VariantOn(c.model, c.class); got != c.name {
			t.Errorf("VariantOn(%q, %q) = %q, want %q", c.model, c.class, got, c.name)
		}
		m, cl := SplitVariant(c.name)
		want := c.class
		if want == "" {
			want = DefaultClass
		}
		if m != c.model || cl != want {
			t.Errorf("SplitVariant(%q) = %q, %q; want %q, %q", c.name, m, cl, c.model, want)
		}
	}
	for s, ok := range map[string]bool{"yolov5x": true, "yolov5x@fast": true, "yolov5x@default": false,
		"@fast": false, "yolov5x@": false, "a@b@c": false, "a.b@c": false, "a@b.c": false} {
		if ValidVariantName(s) != ok {
			t.Errorf("ValidVariantName(%q) = %v, want %v", s, !ok, ok)
		}
	}
	if k, err := ParseVariantKey("detect/yolov5x@fast"); err != nil || k.Variant != "yolov5x@fast" {
		t.Errorf("ParseVariantKey: %v, %v", k, err)
	}
	if _, err := ParseTaskSubject(TaskSubject("traffic", "detect", "yolov5x@fast")); err != nil {
		t.Errorf("ParseTaskSubject: %v", err)
	}
}
