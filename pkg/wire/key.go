package wire

import (
	"fmt"
	"strings"
)

// VariantKey names one variant of a pipeline's task, spelled "task/variant": the keys of a plan's
// routing.downstream, fanout and profiles, each entry of the Sleipnir-Path header, of ItemResult.Path and of a
// spec's path_accuracy paths. It lives here, not in pkg/plan, because those are wire formats.
type VariantKey struct{ Task, Variant string }

// String spells the key: "task/variant".
func (k VariantKey) String() string { return k.Task + "/" + k.Variant }

// MarshalText spells the key as String does, so that a key logged (slog's JSON handler) or encoded reads as text.
func (k VariantKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// In is the key of the variant in pipeline as heartbeats name it.
func (k VariantKey) In(pipeline string) ServedKey {
	return ServedKey{Pipeline: pipeline, Task: k.Task, Variant: k.Variant}
}

// ParseVariantKey reads a "task/variant". The text comes from plans, headers and heartbeats (untrusted), so both
// names must be valid (ValidName, ValidVariantName); anything else is an error and the zero key.
func ParseVariantKey(s string) (VariantKey, error) {
	task, variant, ok := strings.Cut(s, "/")
	if !ok || !ValidName(task) || !ValidVariantName(variant) {
		return VariantKey{}, fmt.Errorf("variant key %.80q: want task/variant, each a valid name", s)
	}
	return VariantKey{Task: task, Variant: variant}, nil
}

// ServedKey names a variant a worker serves as heartbeats do, spelled "pipeline:task/variant":
// Registration.Variant, the keys of Registration.Observed, AssignmentFailure.Variant.
type ServedKey struct{ Pipeline, Task, Variant string }

// String spells the key: "pipeline:task/variant".
func (k ServedKey) String() string { return k.Pipeline + ":" + k.Key().String() }

// MarshalText spells the key as String does (see VariantKey.MarshalText).
func (k ServedKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Key is the served variant's key within its pipeline.
func (k ServedKey) Key() VariantKey { return VariantKey{Task: k.Task, Variant: k.Variant} }

// ParseServedKey reads a "pipeline:task/variant" (untrusted, as ParseVariantKey): all three names must be valid;
// anything else is an error and the zero key.
func ParseServedKey(s string) (ServedKey, error) {
	pipeline, rest, _ := strings.Cut(s, ":")
	k, err := ParseVariantKey(rest)
	if err != nil || !ValidName(pipeline) {
		return ServedKey{}, fmt.Errorf("served key %.80q: want pipeline:task/variant, each a valid name", s)
	}
	return ServedKey{Pipeline: pipeline, Task: k.Task, Variant: k.Variant}, nil
}

// ParseTaskSubject reads the variant a TaskSubject names (a consumer's filter subject, read back from the server);
// anything else is an error.
func ParseTaskSubject(subject string) (ServedKey, error) {
	rest, ok := strings.CutPrefix(subject, TaskPrefix)
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 || !ValidName(parts[0]) || !ValidName(parts[1]) || !ValidVariantName(parts[2]) {
		return ServedKey{}, fmt.Errorf("subject %.80q: want %spipeline.task.variant", subject, TaskPrefix)
	}
	return ServedKey{Pipeline: parts[0], Task: parts[1], Variant: parts[2]}, nil
}

// AppendPath extends a HeaderPath value by one variant.
func AppendPath(path string, k VariantKey) string {
	if path == "" {
		return k.String()
	}
	return path + "," + k.Task + "/" + k.Variant // one string made, not two
}

// SplitPath decodes a HeaderPath value.
func SplitPath(path string) []string {
	if path == "" {
		return nil
	}
	return strings.Split(path, ",")
}
