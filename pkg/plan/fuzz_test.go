package plan

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/alloctest"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// Fuzz targets for the KV values workers and frontends read: plans and assignments. Seeds (a static plan of the
// traffic example, crafted inputs) are in testdata/fuzz/<target>.

func FuzzPlanJSON(f *testing.F) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		f.Fatal(err)
	}
	seed, err := Static(spec)
	if err != nil {
		f.Fatal(err)
	}
	b, _ := json.Marshal(seed)
	f.Add(b)
	workers := []string{"w0", "w1", "w2", "w3", "w4"}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, ok := alloctest.DecodeJSON[Plan](t, data)
		if !ok {
			return
		}
		// Readers of the bucket (catalog, workers, the planner) keep only a plan that passes Validate; what they do
		// with it then must hold for any plan that passes, including Hosted, which needs the spec's variants.
		if err := p.Validate(spec); err != nil {
			if err.Error() == "" {
				t.Fatal("a refusal without a message")
			}
			return
		}
		p.Servers()
		p.BudgetScale(spec)
		for _, task := range spec.Tasks {
			p.Hosted(spec, task.Name)
		}
		for _, v := range p.Variants {
			if p.Find(v.Task, v.Variant) == nil {
				t.Fatalf("Find(%q, %q) misses a listed variant", v.Task, v.Variant)
			}
			p.Rehome(v.Task, v.Variant, "", 0.5)
			for upstream := range p.Routing.Downstream {
				p.Rehome(v.Task, v.Variant, upstream, 0.999)
			}
		}
		for _, u := range []float64{0, 0.5, 0.999} {
			got := Pick(p.Routing.Root, u)
			if !slices.ContainsFunc(p.Routing.Root, func(r Route) bool { return r.Variant == got }) && (got != "" || len(p.Routing.Root) > 0) {
				t.Fatalf("Pick(%v, %v) = %q, not one of the routes", p.Routing.Root, u, got)
			}
		}
		next, _ := Assign([]*Plan{&p}, workers, nil, nil)
		if len(next) != len(workers) {
			t.Fatalf("Assign gave %d assignments to %d workers", len(next), len(workers))
		}
		again, _ := Assign([]*Plan{&p}, workers, nil, next)
		for _, w := range workers {
			if next[w].Worker != w || again[w] != next[w] {
				t.Fatalf("worker %s: assigned %+v, then %+v: Assign must keep what still holds", w, next[w], again[w])
			}
		}
	})
}

func FuzzAssignmentJSON(f *testing.F) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		f.Fatal(err)
	}
	seed, err := Static(spec)
	if err != nil {
		f.Fatal(err)
	}
	seed.Epoch = 3
	f.Add([]byte(`{"worker":"w1","pipeline":"traffic","task":"detect","variant":"yolo","max_batch":4,"budget_ms":12.5,"epoch":3}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, ok := alloctest.DecodeJSON[Assignment](t, data)
		if !ok {
			return
		}
		if err := a.Validate(a.Worker, spec, seed); err == nil && !a.Idle() && seed.Find(a.Task, a.Variant) == nil {
			t.Fatalf("assignment %+v passed validation against a plan that does not host it", a)
		}
		if a.Idle() != (a.Variant == "") {
			t.Fatal("Idle disagrees with the variant")
		}
		a.Key()
	})
}
