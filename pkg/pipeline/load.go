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
	if err := s.checkClassProfiles(); err != nil {
		return nil, err
	}
	s.expandClasses()
	if err := s.validate(); err != nil {
		return nil, err
	}
	s.applyDefaults()
	s.computeLevels()
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
			v := &t.Variants[j]
			for c, b := range v.Branches {
				if b.Distribution == "" {
					b.Distribution = FanoutPoisson
					v.Branches[c] = b
				}
			}
			f := v.Fanout
			if f == nil {
				continue
			}
			if f.Distribution == "" {
				f.Distribution = FanoutPoisson
			}
			if shared := t.SharedChildren(); len(f.Shares) == 0 && len(shared) == 1 {
				f.Shares = map[string]float64{shared[0]: 1}
			}
		}
	}
}
