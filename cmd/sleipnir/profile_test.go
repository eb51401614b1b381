package main

import (
	"path/filepath"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// TestProfileOnClassKeepsOtherClasses: `profile --class fast` records its measurements as class fast's and keeps
// the file's measurements of the other classes; profiling the default class again replaces only the default's.
func TestProfileOnClassKeepsOtherClasses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.profile.yaml")
	measure := func(ms float64) *pipeline.ProfileFile {
		return &pipeline.ProfileFile{Pipeline: "p", Variants: []pipeline.VariantProfile{{Task: "a", Variant: "x",
			Accuracy: 0.5, Profile: []pipeline.ProfilePoint{{Batch: 1, P50Ms: ms, P95Ms: ms}}}}}
	}
	write := func(pf *pipeline.ProfileFile, class string) {
		t.Helper()
		if err := onClass(pf, class, path); err != nil {
			t.Fatal(err)
		}
		if err := pipeline.WriteProfileFile(path, pf, "# test\n"); err != nil {
			t.Fatal(err)
		}
	}
	write(measure(10), "default")
	write(measure(2), "fast")
	write(measure(11), "default")
	pf, err := pipeline.ReadProfileFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, vp := range pf.Variants {
		got[vp.Class] = vp.Profile[0].P50Ms
	}
	if len(pf.Variants) != 2 || got[""] != 11 || got["fast"] != 2 {
		t.Fatalf("profiles by class %v (%d entries), want the default's 11 ms and fast's 2 ms", got, len(pf.Variants))
	}
}
