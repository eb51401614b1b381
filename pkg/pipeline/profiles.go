package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// ProfileFile is what the profiler measures for a pipeline, in a file of its own that the spec names with
// `profiles:` (relative to the spec). Loading the spec merges it in: each variant's accuracy, profile, swap time
// and multiplicative factor, and the end-to-end accuracy of each path.
type ProfileFile struct {
	Pipeline     string           `json:"pipeline" yaml:"pipeline"`
	Measured     Measurement      `json:"measured" yaml:"measured"`
	Variants     []VariantProfile `json:"variants" yaml:"variants"`
	PathAccuracy []PathAccuracy   `json:"path_accuracy,omitempty" yaml:"path_accuracy,omitempty"`
	// Cascades are the measured levels of each cascade the spec declares (pipeline.Cascade.Levels).
	Cascades []CascadeProfile `json:"cascades,omitempty" yaml:"cascades,omitempty"`
}

// CascadeProfile is the measured levels of one task's cascade: on the task's own items, and on each path's
// (Cascade.Paths).
type CascadeProfile struct {
	Task   string         `json:"task" yaml:"task"`
	Levels []CascadeLevel `json:"levels" yaml:"levels"`
	Paths  []CascadePath  `json:"paths,omitempty" yaml:"paths,omitempty"`
}

// Measurement says where and how a profile was measured.
type Measurement struct {
	Date        string `json:"date" yaml:"date"`
	CPUs        int    `json:"cpus" yaml:"cpus"`
	Runtime     string `json:"runtime" yaml:"runtime"`
	Images      int    `json:"images" yaml:"images"`
	Repetitions int    `json:"repetitions" yaml:"repetitions"`
}

// VariantProfile is the measurement of one variant.
type VariantProfile struct {
	Task    string `json:"task" yaml:"task"`
	Variant string `json:"variant" yaml:"variant"`
	// Class is the server class the profile was measured on (absent: the default class, whose profile is the
	// variant's `profile`; another goes into its class_profiles).
	Class    string         `json:"class,omitempty" yaml:"class,omitempty"`
	Accuracy float64        `json:"accuracy" yaml:"accuracy"`
	SwapMs   float64        `json:"swap_ms" yaml:"swap_ms"`
	Fanout   float64        `json:"fanout_mean,omitempty" yaml:"fanout_mean,omitempty"`
	Profile  []ProfilePoint `json:"profile" yaml:"profile"`
	// Metrics are the task's own accuracy measures (recall, precision, character accuracy...), for people.
	Metrics map[string]float64 `json:"metrics,omitempty" yaml:"metrics,omitempty"`
}

// ReadProfileFile reads a profile file.
func ReadProfileFile(path string) (*ProfileFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pf ProfileFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&pf); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &pf, nil
}

// WriteProfileFile writes pf as YAML, with a header comment.
func WriteProfileFile(path string, pf *ProfileFile, header string) error {
	b, err := yaml.Marshal(pf)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte(header), b...), 0o644)
}

// mergeProfiles resolves a spec document's `profiles:` against the spec's directory and writes the measurements into
// the document's variants. With placeholders (for the profiler, which is about to measure them), a missing file is
// no error and a variant without measurements gets neutral ones.
func mergeProfiles(doc map[string]any, dir string, placeholders bool) error {
	name, _ := doc["profiles"].(string)
	var pf *ProfileFile
	if name != "" {
		var err error
		pf, err = ReadProfileFile(filepath.Join(dir, name))
		switch {
		case errors.Is(err, os.ErrNotExist) && placeholders:
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("profiles: %s does not exist: measure it with `bin/sleipnir profile --pipeline <this spec>`", filepath.Join(dir, name))
		case err != nil:
			return fmt.Errorf("profiles: %w", err)
		}
	}
	tasks, _ := doc["tasks"].([]any)
	if pf != nil {
		if err := writeProfiles(doc, tasks, pf, name); err != nil {
			return err
		}
	}
	if placeholders {
		writePlaceholders(doc, tasks)
	}
	return nil
}

// findVariant is the document's variant of a task, and whether that task has children.
func findVariant(tasks []any, task, variant string) (map[string]any, bool) {
	for _, t := range tasks {
		tm, _ := t.(map[string]any)
		if tm["name"] != task {
			continue
		}
		vs, _ := tm["variants"].([]any)
		for _, v := range vs {
			if vm, _ := v.(map[string]any); vm["name"] == variant {
				return vm, len(asList(tm["children"])) > 0
			}
		}
	}
	return nil, false
}

// writeProfiles writes the measurements of profile file pf (named name) into the document's variants, and its path
// accuracies unless the spec gives its own.
func writeProfiles(doc map[string]any, tasks []any, pf *ProfileFile, name string) error {
	if n, _ := doc["name"].(string); pf.Pipeline != n {
		return fmt.Errorf("profiles: %s profiles pipeline %q, not %q", name, pf.Pipeline, n)
	}
	for _, vp := range pf.Variants {
		vm, hasChildren := findVariant(tasks, vp.Task, vp.Variant)
		if vm == nil {
			return fmt.Errorf("profiles: %s measures %s/%s, which the spec does not have", name, vp.Task, vp.Variant)
		}
		vm["accuracy"] = vp.Accuracy
		vm["swap_ms"] = vp.SwapMs
		var points []any
		for _, p := range vp.Profile {
			pt := map[string]any{"batch": p.Batch, "p50_ms": p.P50Ms, "p95_ms": p.P95Ms}
			if p.P99Ms > 0 {
				pt["p99_ms"] = p.P99Ms
			}
			points = append(points, pt)
		}
		if vp.Class == "" || vp.Class == wire.DefaultClass {
			vm["profile"] = points
		} else {
			cps, _ := vm["class_profiles"].(map[string]any)
			if cps == nil {
				cps = map[string]any{}
			}
			cps[vp.Class] = points
			vm["class_profiles"] = cps
		}
		if hasChildren {
			f, _ := vm["fanout"].(map[string]any)
			if f == nil {
				f = map[string]any{}
			}
			f["mean"] = vp.Fanout
			vm["fanout"] = f
		}
	}
	if err := writeCascades(tasks, pf, name); err != nil {
		return err
	}
	if len(pf.PathAccuracy) > 0 && doc["path_accuracy"] == nil {
		var pas []any
		for _, pa := range pf.PathAccuracy {
			pas = append(pas, map[string]any{"path": toAny(pa.Path), "accuracy": pa.Accuracy})
		}
		doc["path_accuracy"] = pas
	}
	return nil
}

// writePlaceholders gives each variant the profiler has not measured yet neutral measurements: accuracy 1, 1 ms at
// every batch size, a fanout of 1, so that the spec validates.
func writePlaceholders(doc map[string]any, tasks []any) {
	batches := asList(doc["batch_sizes"])
	if len(batches) == 0 {
		batches = []any{1}
	}
	for _, t := range tasks {
		tm, _ := t.(map[string]any)
		for _, v := range asList(tm["variants"]) {
			vm, _ := v.(map[string]any)
			if vm == nil {
				continue
			}
			if _, ok := vm["accuracy"]; !ok {
				vm["accuracy"] = 1.0
			}
			if _, ok := vm["profile"]; !ok {
				var points []any
				for _, b := range batches {
					points = append(points, map[string]any{"batch": b, "p50_ms": 1.0, "p95_ms": 1.0})
				}
				vm["profile"] = points
			}
			if _, ok := vm["fanout"]; !ok && len(asList(tm["children"])) > 0 {
				vm["fanout"] = map[string]any{"mean": 1.0}
			}
		}
		// A cascade's levels: none escalates, every answer right.
		if c, _ := tm["cascade"].(map[string]any); c != nil && c["levels"] == nil {
			var levels []any
			for _, th := range asList(c["thresholds"]) {
				levels = append(levels, map[string]any{"threshold": th, "escalation": 0.0, "accuracy": 1.0,
					"next_accuracy": 1.0})
			}
			if len(levels) > 0 {
				c["levels"] = levels
			}
		}
	}
}

func asList(v any) []any { l, _ := v.([]any); return l }

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}
