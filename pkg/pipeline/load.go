package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/sleipnir-serving/sleipnir/schemas"
)

// Load reads, validates and completes the pipeline spec in a YAML file, merging in the profile file it names, if
// any. Errors name the file and the field.
func Load(path string) (*Spec, error) { return load(path, false) }

// LoadForProfiling is Load for the profiler, which is about to measure the variants: a missing profile file is no
// error, and a variant without measurements gets neutral ones.
func LoadForProfiling(path string) (*Spec, error) { return load(path, true) }

func load(path string, placeholders bool) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pipeline spec: %w", err)
	}
	s, err := parse(data, filepath.Dir(path), placeholders)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Parse validates and completes a YAML pipeline spec. A spec that names a profile file must be read with Load,
// which knows the directory the file is relative to.
func Parse(data []byte) (*Spec, error) { return parse(data, "", false) }

func parse(data []byte, dir string, placeholders bool) (*Spec, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	doc, err := jsonValue(doc, "")
	if err != nil {
		return nil, err
	}
	if m, ok := doc.(map[string]any); ok {
		if _, ok := m["profiles"].(string); ok {
			if dir == "" {
				return nil, errors.New("profiles: a profile file is relative to the spec file: load the spec with pipeline.Load")
			}
			if err := mergeProfiles(m, dir, placeholders); err != nil {
				return nil, err
			}
		}
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return ParseJSON(js)
}

// ParseJSON validates and completes a JSON pipeline spec (as the planner stores it in the KV bucket).
func ParseJSON(data []byte) (*Spec, error) {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	sch, err := compiledSchema()
	if err != nil {
		return nil, err
	}
	if err := sch.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, schemaErrors(ve)
		}
		return nil, err
	}
	var s Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, err
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	s.applyDefaults()
	return &s, nil
}

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

func compiledSchema() (*jsonschema.Schema, error) {
	schemaOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas.PipelineSchema))
		if err != nil {
			schemaErr = fmt.Errorf("embedded pipeline schema: %w", err)
			return
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource("pipeline.schema.json", doc); err != nil {
			schemaErr = err
			return
		}
		schema, schemaErr = c.Compile("pipeline.schema.json")
	})
	return schema, schemaErr
}

// jsonValue turns decoded YAML into values JSON can encode (YAML allows non-string map keys).
func jsonValue(v any, path string) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			j, err := jsonValue(e, joinPath(path, k))
			if err != nil {
				return nil, err
			}
			v[k] = j
		}
		return v, nil
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			ks := fmt.Sprint(k)
			j, err := jsonValue(e, joinPath(path, ks))
			if err != nil {
				return nil, err
			}
			out[ks] = j
		}
		return out, nil
	case []any:
		for i, e := range v {
			j, err := jsonValue(e, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			v[i] = j
		}
		return v, nil
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("%s: %v is not a finite number", path, v)
		}
	}
	return v, nil
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// FieldPath turns a JSON pointer's tokens into the form errors use: tasks[1].variants[2].profile.
func FieldPath(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		if _, err := strconv.Atoi(t); err == nil {
			b.WriteString("[" + t + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(t)
	}
	if b.Len() == 0 {
		return "(spec)"
	}
	return b.String()
}

var printer = message.NewPrinter(language.English)

// schemaErrors lists the leaf errors of a schema validation, one per line, sorted by field.
func schemaErrors(ve *jsonschema.ValidationError) error {
	var lines []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			lines = append(lines, FieldPath(e.InstanceLocation)+": "+e.ErrorKind.LocalizedString(printer))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return errorList(lines)
}

func errorList(lines []string) error {
	sort.Strings(lines)
	lines = dedupe(lines)
	return errors.New(strings.Join(lines, "\n"))
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// validate checks what the schema cannot express.
func (s *Spec) validate() error {
	var errs []string
	add := func(path, format string, args ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, args...)) }

	batches := s.BatchSizes
	if len(batches) == 0 {
		batches = []int{1}
	}
	for i := 1; i < len(batches); i++ {
		if batches[i] <= batches[i-1] {
			add(fmt.Sprintf("batch_sizes[%d]", i), "%d does not follow %d: batch sizes must be strictly increasing", batches[i], batches[i-1])
		}
	}
	if s.Priority < 0 || s.Priority > MaxPriority {
		add("priority", "%d: want a class from 0 to %d", s.Priority, MaxPriority)
	}
	allowed := map[int]bool{}
	for _, b := range batches {
		allowed[b] = true
	}

	tasks := map[string]int{}
	for i, t := range s.Tasks {
		if j, dup := tasks[t.Name]; dup {
			add(fmt.Sprintf("tasks[%d].name", i), "task %q is also tasks[%d]", t.Name, j)
			continue
		}
		tasks[t.Name] = i
	}
	parent := map[string]string{}
	for i, t := range s.Tasks {
		seen := map[string]bool{}
		for j, c := range t.Children {
			p := fmt.Sprintf("tasks[%d].children[%d]", i, j)
			switch {
			case seen[c]:
				add(p, "child %q listed twice", c)
			case c == t.Name:
				add(p, "task %q lists itself as a child", c)
			default:
				if _, ok := tasks[c]; !ok {
					add(p, "no task named %q", c)
				} else if other, ok := parent[c]; ok && other != t.Name {
					add(p, "task %q already has parent %q: tasks must form a tree", c, other)
				} else {
					parent[c] = t.Name
				}
			}
			seen[c] = true
		}
	}
	var roots []string
	for _, t := range s.Tasks {
		if _, ok := parent[t.Name]; !ok {
			roots = append(roots, t.Name)
		}
	}
	switch {
	case len(roots) == 0:
		add("tasks", "no root task: every task is some task's child (a cycle)")
	case len(roots) > 1:
		add("tasks", "%d root tasks (%s): exactly one task may have no parent", len(roots), strings.Join(roots, ", "))
	default:
		// Everything must hang from the root; a cycle elsewhere leaves tasks unreachable.
		reached := map[string]bool{}
		var visit func(string)
		visit = func(n string) {
			if reached[n] {
				return
			}
			reached[n] = true
			if i, ok := tasks[n]; ok {
				for _, c := range s.Tasks[i].Children {
					visit(c)
				}
			}
		}
		visit(roots[0])
		for i, t := range s.Tasks {
			if !reached[t.Name] {
				add(fmt.Sprintf("tasks[%d]", i), "task %q is not reachable from the root %q (a cycle)", t.Name, roots[0])
			}
		}
	}

	for i, t := range s.Tasks {
		variants := map[string]bool{}
		for j, v := range t.Variants {
			vp := fmt.Sprintf("tasks[%d].variants[%d]", i, j)
			if variants[v.Name] {
				add(vp+".name", "variant %q appears twice in task %q", v.Name, t.Name)
			}
			variants[v.Name] = true
			s.validateExecutor(t, v.Executor, vp+".executor", add)
			switch {
			case len(t.Children) > 0 && v.Fanout == nil:
				add(vp, "fanout is required: task %q has children", t.Name)
			case len(t.Children) == 0 && v.Fanout != nil:
				add(vp+".fanout", "task %q has no children to fan out to", t.Name)
			case v.Fanout != nil:
				s.validateShares(t, v.Fanout, vp+".fanout", add)
				validateDispersion(v.Fanout, vp+".fanout", add)
			}
			s.validateProfile(v.Profile, batches, allowed, vp+".profile", add)
		}
	}

	for i, pa := range s.PathAccuracy {
		s.validatePath(pa.Path, fmt.Sprintf("path_accuracy[%d].path", i), roots, add)
		for j := 0; j < i; j++ {
			if strings.Join(s.PathAccuracy[j].Path, ",") == strings.Join(pa.Path, ",") {
				add(fmt.Sprintf("path_accuracy[%d]", i), "same path as path_accuracy[%d]", j)
			}
		}
	}

	placed := map[string]int{}
	for i, a := range s.Allocation {
		p := fmt.Sprintf("allocation[%d]", i)
		ti, ok := tasks[a.Task]
		if !ok {
			add(p+".task", "no task named %q", a.Task)
			continue
		}
		if !hasVariant(&s.Tasks[ti], a.Variant) {
			add(p+".variant", "task %q has no variant %q", a.Task, a.Variant)
		}
		if !allowed[a.MaxBatch] {
			add(p+".max_batch", "%d is not in batch_sizes %v", a.MaxBatch, batches)
		}
		key := a.Task + "/" + a.Variant
		if j, dup := placed[key]; dup {
			add(p, "%s is also allocation[%d]", key, j)
		}
		placed[key] = i
	}
	validateTensorNames("inputs", s.Inputs, true, add)
	validateTensorNames("outputs", s.Outputs, false, add)
	if len(errs) > 0 {
		return errorList(errs)
	}
	return nil
}

// validateTensorNames refuses a declared tensor name used twice: a client could not tell the two apart. With
// alternatives, an input's name may be declared again with another datatype (a request carries one of them: OCR's
// image, encoded or as pixels); the datatype tells them apart.
func validateTensorNames(field string, ts []TensorSpec, alternatives bool, add func(string, string, ...any)) {
	seen := map[string]int{}
	for i, t := range ts {
		key := t.Name
		if alternatives {
			key += " " + t.Datatype
		}
		if j, dup := seen[key]; dup {
			add(fmt.Sprintf("%s[%d].name", field, i), "tensor %q is also %s[%d]", t.Name, field, j)
			continue
		}
		seen[key] = i
	}
}

// validateExecutor checks what the schema cannot: which fields go with which kind and program, and which programs fit
// where in the tree.
func (s *Spec) validateExecutor(t Task, e Executor, path string, add func(string, string, ...any)) {
	if e.Kind != ExecutorONNX {
		if e.Model != "" || e.Program != "" || e.InputSize != 0 || e.Threads != 0 {
			add(path, "model, program, input_size and threads are for kind onnx, not %q", e.Kind)
		}
		return
	}
	if e.Model == "" {
		add(path+".model", "an onnx executor needs the model file")
	}
	switch e.Program {
	case "", ProgramTensor:
		if len(t.Children) > 0 {
			add(path+".program", "program tensor emits no sub-requests: task %q has children", t.Name)
		}
	case ProgramOCRDetect:
		if len(t.Children) != 1 {
			add(path+".program", "program ocr-detect sends each line to one child task; task %q has %d", t.Name, len(t.Children))
		}
	case ProgramOCRRecognize:
		if len(t.Children) > 0 {
			add(path+".program", "program ocr-recognize ends a path: task %q has children", t.Name)
		}
	}
}

func hasVariant(t *Task, name string) bool {
	for _, v := range t.Variants {
		if v.Name == name {
			return true
		}
	}
	return false
}

// validateDispersion checks that a negative binomial has its dispersion, and that no other distribution has one.
func validateDispersion(f *Fanout, path string, add func(string, string, ...any)) {
	switch {
	case f.Distribution == FanoutNegativeBinomial && !(f.Dispersion > 0):
		add(path+".dispersion", "required and > 0 for distribution %q", FanoutNegativeBinomial)
	case f.Distribution != FanoutNegativeBinomial && f.Dispersion != 0:
		add(path+".dispersion", "only distribution %q has a dispersion", FanoutNegativeBinomial)
	}
}

func (s *Spec) validateShares(t Task, f *Fanout, path string, add func(string, string, ...any)) {
	if len(f.Shares) == 0 {
		if len(t.Children) > 1 {
			add(path+".shares", "required: task %q has %d children", t.Name, len(t.Children))
		}
		return
	}
	sum := 0.0
	for c, share := range f.Shares {
		if !contains(t.Children, c) {
			add(path+".shares."+c, "%q is not a child of task %q", c, t.Name)
		}
		sum += share
	}
	for _, c := range t.Children {
		if _, ok := f.Shares[c]; !ok {
			add(path+".shares", "no share for child task %q", c)
		}
	}
	if math.Abs(sum-1) > 1e-6 {
		add(path+".shares", "shares sum to %.6g, want 1", sum)
	}
}

func (s *Spec) validateProfile(profile []ProfilePoint, batches []int, allowed map[int]bool, path string, add func(string, string, ...any)) {
	listed := map[int]bool{}
	for k, pt := range profile {
		pp := fmt.Sprintf("%s[%d]", path, k)
		if !allowed[pt.Batch] {
			add(pp+".batch", "%d is not in batch_sizes %v", pt.Batch, batches)
		}
		if listed[pt.Batch] {
			add(pp+".batch", "batch size %d listed twice", pt.Batch)
		}
		listed[pt.Batch] = true
		if pt.P95Ms < pt.P50Ms {
			add(pp+".p95_ms", "%g is below p50_ms %g", pt.P95Ms, pt.P50Ms)
		}
		if pt.P99Ms != 0 && pt.P99Ms < pt.P95Ms {
			add(pp+".p99_ms", "%g is below p95_ms %g", pt.P99Ms, pt.P95Ms)
		}
		if k > 0 {
			prev := profile[k-1]
			if pt.Batch < prev.Batch {
				add(pp+".batch", "%d follows %d: list batch sizes in increasing order", pt.Batch, prev.Batch)
			} else if pt.P50Ms < prev.P50Ms {
				add(pp+".p50_ms", "%g is below the %g of batch %d: latency cannot fall as the batch grows", pt.P50Ms, prev.P50Ms, prev.Batch)
			}
		}
	}
	for _, b := range batches {
		if !listed[b] {
			add(path, "batch size %d missing", b)
		}
	}
}

func (s *Spec) validatePath(path []string, at string, roots []string, add func(string, string, ...any)) {
	if len(roots) != 1 {
		return
	}
	expect := []string{roots[0]}
	for k, hop := range path {
		task, variant, _ := strings.Cut(hop, "/")
		p := fmt.Sprintf("%s[%d]", at, k)
		t := s.Task(task)
		switch {
		case !contains(expect, task):
			add(p, "task %q cannot come here (want one of %s)", task, strings.Join(expect, ", "))
			return
		case !hasVariant(t, variant):
			add(p, "task %q has no variant %q", task, variant)
			return
		}
		expect = t.Children
	}
	if len(expect) > 0 {
		add(at, "ends before a leaf task (next would be one of %s)", strings.Join(expect, ", "))
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (s *Spec) applyDefaults() {
	if s.DeadlinePolicy == "" {
		s.DeadlinePolicy = "reroute"
	}
	if len(s.BatchSizes) == 0 {
		s.BatchSizes = []int{1}
	}
	for i := range s.Tasks {
		t := &s.Tasks[i]
		for j := range t.Variants {
			f := t.Variants[j].Fanout
			if f == nil {
				continue
			}
			if f.Distribution == "" {
				f.Distribution = FanoutPoisson
			}
			if len(f.Shares) == 0 && len(t.Children) == 1 {
				f.Shares = map[string]float64{t.Children[0]: 1}
			}
		}
	}
}
