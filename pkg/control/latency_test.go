package control

import (
	"slices"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// recording is an allocator that remembers the spec it last planned on.
type recording struct {
	MILP
	spec **pipeline.Spec
}

func (r recording) Allocate(spec *pipeline.Spec, o Observed) (*plan.Plan, error) {
	*r.spec = spec
	return r.MILP.Allocate(spec, o)
}

// TestLoopPlansWithMeasuredLatencies: a move of the measured latencies beyond the re-plan threshold solves the
// allocation again (not sooner than latencyReplanGap after the last), on the spec with the blended profiles, and
// the plan carries them; with ProfilesOnly they are ignored.
func TestLoopPlansWithMeasuredLatencies(t *testing.T) {
	spec := trafficSpec(t)
	root := &spec.Tasks[0]
	v := root.MostAccurate()
	hop := wire.VariantKey{Task: root.Name, Variant: v.Name}.String()
	doubled := slices.Clone(v.Profile)
	for i := range doubled {
		doubled[i].P50Ms *= 2
		doubled[i].P95Ms *= 2
		doubled[i].P99Ms *= 2
	}
	slow := map[string][]pipeline.ProfilePoint{hop: doubled}
	for _, profilesOnly := range []bool{false, true} {
		var got *pipeline.Spec
		l := New(spec, Config{ProfilesOnly: profilesOnly}, recording{MILP{Utilization: 0.85, Workers: 1}, &got},
			mustStatic(t, spec))
		t0 := time.Unix(1000, 0)
		step := func(at time.Duration, o Observed) Step {
			st := l.Next(t0.Add(at), o)
			if st.Err != nil {
				t.Fatal(st.Err)
			}
			l.Published(st, o, t0.Add(at))
			return st
		}
		first := Observed{Demand: 50, Servers: 20}
		if profilesOnly { // measurements there from the start: a plan made without them is not one made from them
			first.Profiles = slow
		}
		if st := step(0, first); !st.Replanned || got != spec {
			t.Fatalf("first tick: replanned %v, on the spec itself %v", st.Replanned, got == spec)
		}
		if st := step(time.Second, Observed{Demand: 50, Servers: 20, Profiles: slow}); st.Replanned {
			t.Fatal("re-planned for the latencies within latencyReplanGap of the last plan")
		}
		st := step(latencyReplanGap, Observed{Demand: 50, Servers: 20, Profiles: slow})
		if profilesOnly {
			if st.Replanned {
				t.Fatal("ProfilesOnly: re-planned for measured latencies")
			}
			continue
		}
		if !st.Replanned {
			t.Fatal("a variant twice as slow as profiled: no new plan")
		}
		if p := got.Variant(root.Name, v.Name).Profile; p[0].P50Ms != doubled[0].P50Ms {
			t.Fatalf("planned on %v, want the measured %v", p, doubled)
		}
		if spec.Variant(root.Name, v.Name).Profile[0].P50Ms == doubled[0].P50Ms {
			t.Fatal("the loop changed the spec")
		}
		if err := st.Plan.Validate(spec); err != nil || len(st.Plan.Profiles[hop]) != len(doubled) {
			t.Fatalf("the plan: %v, profiles %v", err, st.Plan.Profiles)
		}
		if vp := st.Plan.Find(root.Name, v.Name); vp != nil && vp.BudgetMs < doubled[0].P50Ms {
			t.Fatalf("budget %v ms: below the measured latency of one item", vp.BudgetMs)
		}
		if st := step(latencyReplanGap+time.Second, Observed{Demand: 50, Servers: 20, Profiles: slow}); st.Replanned {
			t.Fatal("re-planned again for the same latencies")
		}
	}
}

func mustStatic(t *testing.T, spec *pipeline.Spec) *plan.Plan {
	t.Helper()
	p, err := plan.Static(spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
