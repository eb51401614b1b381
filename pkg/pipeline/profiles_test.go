package pipeline

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const profiledSpec = `
name: p
slo_ms: 1000
batch_sizes: [1, 4]
profiles: p.profile.yaml
tasks:
  - name: det
    children: [rec]
    variants:
      - {name: small, executor: {kind: onnx, model: d.onnx, program: ocr-detect}}
  - name: rec
    variants:
      - {name: fast, executor: {kind: onnx, model: r.onnx, program: ocr-recognize}}
`

const profileFile = `
pipeline: p
measured: {date: "2026-11-23", cpus: 2, runtime: onnxruntime 1.30.0, images: 10, repetitions: 3}
variants:
  - {task: det, variant: small, accuracy: 0.9, swap_ms: 120, fanout_mean: 4.5, profile: [{batch: 1, p50_ms: 30, p95_ms: 35}, {batch: 4, p50_ms: 100, p95_ms: 110}]}
  - {task: rec, variant: fast, accuracy: 0.8, swap_ms: 90, profile: [{batch: 1, p50_ms: 10, p95_ms: 12}, {batch: 4, p50_ms: 25, p95_ms: 30}]}
path_accuracy:
  - {path: [det/small, rec/fast], accuracy: 0.7}
`

func writeFiles(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Load merges the profile file a spec names: accuracy, profile, swap time, fan-out and path accuracies.
func TestLoadMergesProfiles(t *testing.T) {
	dir := writeFiles(t, map[string]string{"p.yaml": profiledSpec, "p.profile.yaml": profileFile})
	s, err := Load(filepath.Join(dir, "p.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	det := s.Variant("det", "small")
	if det.Accuracy != 0.9 || det.SwapMs != 120 || det.Fanout.Mean != 4.5 || det.Fanout.Shares["rec"] != 1 || det.LatencyFor(4).P50Ms != 100 {
		t.Errorf("det/small not merged: %+v %+v", det, det.Fanout)
	}
	if rec := s.Variant("rec", "fast"); rec.Accuracy != 0.8 || rec.Fanout != nil || rec.LatencyFor(1).P95Ms != 12 {
		t.Errorf("rec/fast not merged: %+v", rec)
	}
	if len(s.PathAccuracy) != 1 || s.PathAccuracy[0].Accuracy != 0.7 {
		t.Errorf("path accuracy not merged: %+v", s.PathAccuracy)
	}
	// The planner stores the spec as JSON; it must stand on its own.
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseJSON(js); err != nil {
		t.Errorf("the merged spec does not parse back: %v", err)
	}
}

func TestLoadProfileErrors(t *testing.T) {
	tests := []struct {
		name    string
		profile string // "" : no profile file
		want    string
	}{
		{"missing file", "", "p.profile.yaml does not exist: measure it with `bin/sleipnir profile"},
		{"other pipeline", strings.Replace(profileFile, "pipeline: p", "pipeline: q", 1), `profiles pipeline "q", not "p"`},
		{"unknown variant", strings.Replace(profileFile, "variant: fast", "variant: slow", 1), "measures rec/slow, which the spec does not have"},
		{"unknown field", profileFile + "extra: 1\n", "field extra not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"p.yaml": profiledSpec}
			if tc.profile != "" {
				files["p.profile.yaml"] = tc.profile
			}
			_, err := Load(filepath.Join(writeFiles(t, files), "p.yaml"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// The profiler loads a spec before its profile exists: the variants get neutral measurements.
func TestLoadForProfiling(t *testing.T) {
	dir := writeFiles(t, map[string]string{"p.yaml": profiledSpec})
	s, err := LoadForProfiling(filepath.Join(dir, "p.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if v := s.Variant("det", "small"); len(v.Profile) != 2 || v.Fanout == nil || s.Profiles != "p.profile.yaml" {
		t.Errorf("placeholders not filled: %+v", v)
	}
}
