package core

import (
	"slices"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// TestExcessOnlyOfCutVariants: after a new plan, the queue beyond its next batches is moved (Excess) only at a
// variant whose replicas the plan cut: the others' replicas take what their upstream sends them. A plan that cut
// nothing moves nothing.
func TestExcessOnlyOfCutVariants(t *testing.T) {
	now := time.Unix(0, 0)
	c := started(t, now, traffic(t))
	p := c.Pipelines()[0]
	old := p.Current()
	cutAt := slices.IndexFunc(old.Variants, func(v plan.VariantPlan) bool { return v.Replicas >= 2 })
	if cutAt < 0 {
		t.Fatalf("the first plan %+v has no variant of two replicas", old.Variants)
	}
	keptAt := slices.IndexFunc(old.Variants, func(v plan.VariantPlan) bool { return v.Replicas >= 1 && v != old.Variants[cutAt] })
	if keptAt < 0 {
		t.Fatalf("the first plan %+v has no variant but the one of two replicas", old.Variants)
	}
	next := *old
	next.Epoch++
	next.Variants = slices.Clone(old.Variants)
	next.Variants[cutAt].Replicas--
	c.Published(Decision{Pipeline: p, Step: control.Step{Plan: &next, Replanned: true}}, now, plan.Uniform(20))
	cut, kept := next.Variants[cutAt], next.Variants[keptAt]
	pending := 100 * cut.MaxBatch * cut.Replicas
	if got, want := p.Excess(cut.Task, cut.Variant, pending), next.Excess(cut.Task, cut.Variant, pending, 0); got != want || got == 0 {
		t.Errorf("the cut variant %s/%s: excess %d of %d waiting, want %d", cut.Task, cut.Variant, got, pending, want)
	}
	if got := p.Excess(kept.Task, kept.Variant, 100*kept.MaxBatch*kept.Replicas); got != 0 {
		t.Errorf("the variant %s/%s the plan kept: excess %d, want 0", kept.Task, kept.Variant, got)
	}
	same := next
	same.Epoch++
	c.Published(Decision{Pipeline: p, Step: control.Step{Plan: &same, Replanned: true}}, now.Add(time.Second),
		plan.Uniform(20))
	if got := p.Excess(cut.Task, cut.Variant, pending); got != 0 {
		t.Errorf("after a plan that cut nothing: excess %d at %s/%s, want 0", got, cut.Task, cut.Variant)
	}
}
