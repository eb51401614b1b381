package pipeline

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Server classes (wire.DefaultClass and VariantOn say how a class enters a variant's name). A variant may give a
// latency profile per class (class_profiles) beside its `profile`, which is the default class's: a model is hosted on
// a class only where it has a profile there (a model too large for a small device gives none). Parsing expands such a
// variant into one variant per class, "model@class" with that class's profile and the model's accuracy, fan-out and
// executor, so that the planner, routing, workers and simulator treat each class's deployment as a variant of its
// own; accuracy is the model's, whatever the class (PathAccuracyOf reads paths by model).

// Class is the server class the variant runs on (wire.DefaultClass for a variant named by its model alone).
func (v *Variant) Class() string { return wire.ClassOf(v.Name) }

// Model is the model variant's name without its class.
func (v *Variant) Model() string {
	m, _ := wire.SplitVariant(v.Name)
	return m
}

// Classes are the server classes some variant of the spec runs on, in order.
func (s *Spec) Classes() []string {
	var out []string
	for _, t := range s.Tasks {
		for i := range t.Variants {
			if c := t.Variants[i].Class(); !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	sort.Strings(out)
	return out
}

// OnClass says the task has a variant that runs on class.
func (t *Task) OnClass(class string) bool {
	for i := range t.Variants {
		if t.Variants[i].Class() == class {
			return true
		}
	}
	return false
}

// modelPath is path ("task/variant" hops) with each hop's class left out: the path of models whose accuracy it has.
func modelPath(path []string) []string {
	if !strings.Contains(strings.Join(path, ","), "@") {
		return path
	}
	out := make([]string, len(path))
	for i, hop := range path {
		task, variant, _ := strings.Cut(hop, "/")
		model, _ := wire.SplitVariant(variant)
		out[i] = task + "/" + model
	}
	return out
}

// validateClassProfiles checks the class profiles of every variant before they are expanded: valid class names, not
// the default class (whose profile is `profile`), each profile like `profile`, and no class profiles in a cascade's
// task (its two variants are named by model: not yet served per class).
func (s *Spec) validateClassProfiles(batches []int, allowed map[int]bool, add func(string, string, ...any)) {
	for i, t := range s.Tasks {
		for j, v := range t.Variants {
			vp := fmt.Sprintf("tasks[%d].variants[%d]", i, j)
			if strings.Contains(v.Name, "@") && (len(v.ClassProfiles) > 0 || !wire.ValidVariantName(v.Name)) {
				add(vp+".name", "%q: a variant's name is its model's; its classes are class_profiles' keys", v.Name)
			}
			if len(v.ClassProfiles) == 0 {
				continue
			}
			if t.Cascade != nil {
				add(vp+".class_profiles", "task %q is served by a cascade, whose variants run on the default class only", t.Name)
			}
			for class, profile := range v.ClassProfiles {
				cp := vp + ".class_profiles." + class
				if !wire.ValidName(class) || class == wire.DefaultClass {
					add(cp, "class %q: want a name of [A-Za-z0-9_-] other than %q (whose profile is `profile`)", class,
						wire.DefaultClass)
					continue
				}
				s.validateProfile(profile, batches, allowed, cp, add)
			}
		}
	}
}

// expandClasses replaces each variant that has class profiles by its deployments: the variant itself on the default
// class when it has a `profile`, then one "model@class" variant per class in class order.
func (s *Spec) expandClasses() {
	for i := range s.Tasks {
		t := &s.Tasks[i]
		var out []Variant
		for _, v := range t.Variants {
			if len(v.ClassProfiles) == 0 {
				out = append(out, v)
				continue
			}
			classes := make([]string, 0, len(v.ClassProfiles))
			for c := range v.ClassProfiles {
				classes = append(classes, c)
			}
			sort.Strings(classes)
			if len(v.Profile) > 0 {
				d := v
				d.ClassProfiles = nil
				out = append(out, d)
			}
			for _, c := range classes {
				d := v
				d.Name = wire.VariantOn(v.Name, c)
				d.Profile = append([]ProfilePoint(nil), v.ClassProfiles[c]...)
				d.ClassProfiles = nil
				out = append(out, d)
			}
		}
		t.Variants = out
	}
}
