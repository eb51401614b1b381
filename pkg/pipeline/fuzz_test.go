package pipeline

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/alloctest"
)

// Fuzz targets for the pipeline spec: JSON as the planner stores it in the KV bucket (ParseJSON) and YAML as an
// operator writes it (Parse). Seeds (the examples, crafted inputs) are in testdata/fuzz/<target>.

// specAllocBound is what parsing a spec of n bytes may allocate: schema validation and YAML decoding cost a few
// kilobytes per field, which is a multiple of the input, never a size the input claims.
func specAllocBound(n int) uint64 { return 4096*uint64(n) + 8<<20 }

// checkSpec runs the accessors the services call on a spec that parsed, and its JSON round trip: what ParseJSON
// accepted, encoded, parses again to the same encoding.
func checkSpec(t *testing.T, s *Spec) {
	root := s.Root()
	if root == nil {
		t.Fatal("a valid spec has no root task")
	}
	for _, chain := range s.Chains() {
		if chain[0] != root.Name || !s.IsLeaf(chain[len(chain)-1]) {
			t.Fatalf("chain %v does not run from the root to a leaf", chain)
		}
		for i, task := range chain[1:] {
			if s.Parent(task) != chain[i] {
				t.Fatalf("chain %v: parent of %s is %q", chain, task, s.Parent(task))
			}
		}
	}
	for i := range s.Tasks {
		task := &s.Tasks[i]
		if s.Task(task.Name) != task {
			t.Fatalf("Task(%q) is not tasks[%d]", task.Name, i)
		}
		task.MostAccurate()
		for j := range task.Variants {
			v := &task.Variants[j]
			if s.Variant(task.Name, v.Name) == nil {
				t.Fatalf("Variant(%q, %q) not found", task.Name, v.Name)
			}
			for _, b := range s.BatchSizes {
				if _, ok := v.Point(b); !ok {
					t.Fatalf("variant %s/%s has no profile point for batch %d", task.Name, v.Name, b)
				}
				v.LatencyFor(b)
				v.Throughput(b)
			}
		}
	}
	for _, pa := range s.PathAccuracy {
		s.PathAccuracyOf(pa.Path)
	}
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("a valid spec does not encode: %v", err)
	}
	back, err := ParseJSON(js)
	if err != nil {
		t.Fatalf("a valid spec, encoded, does not parse: %v\n%s", err, js)
	}
	if js2, _ := json.Marshal(back); !bytes.Equal(js, js2) {
		t.Fatalf("round trip changed the spec:\n%s\n%s", js, js2)
	}
}

func addExamples(f *testing.F, toJSON bool) {
	for _, name := range []string{"traffic.yaml", "ocr-chain.yaml"} {
		data, err := os.ReadFile("../../examples/" + name)
		if err != nil {
			f.Fatal(err)
		}
		if toJSON {
			s, err := Parse(data)
			if err != nil {
				f.Fatal(err)
			}
			if data, err = json.Marshal(s); err != nil {
				f.Fatal(err)
			}
		}
		f.Add(data)
	}
}

func FuzzSpecJSON(f *testing.F) {
	addExamples(f, true)
	f.Fuzz(func(t *testing.T, data []byte) {
		var s *Spec
		var err error
		if n := alloctest.Bytes(func() { s, err = ParseJSON(data) }); n > specAllocBound(len(data)) {
			t.Fatalf("parsing %d bytes allocated %d", len(data), n)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		checkSpec(t, s)
	})
}

func FuzzSpecYAML(f *testing.F) {
	addExamples(f, false)
	f.Fuzz(func(t *testing.T, data []byte) {
		var s *Spec
		var err error
		if n := alloctest.Bytes(func() { s, err = Parse(data) }); n > specAllocBound(len(data)) {
			t.Fatalf("parsing %d bytes allocated %d", len(data), n)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		checkSpec(t, s)
	})
}
