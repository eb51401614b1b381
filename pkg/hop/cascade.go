package hop

import (
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// escalation is what a cascade's first variant needs to send an item on: the next variant, the plan's threshold
// and the time the next takes (its budget under the plan, and one hop).
type escalation struct {
	next      string
	threshold float64
	nextTime  time.Duration
	geared    bool // a gear put threshold in force (UseGear)
}

// newEscalation is task/variant's escalation under p, nil when the plan runs no cascade from it.
func newEscalation(spec *pipeline.Spec, p *plan.Plan, task, variant string) *escalation {
	th, on := p.Cascades[task]
	t := spec.Task(task)
	if !on || t == nil || t.Cascade == nil || t.Cascade.Variants[0] != variant {
		return nil
	}
	next := t.Cascade.Next(variant)
	e := &escalation{next: next, threshold: th}
	if vp := p.Find(task, next); vp != nil {
		e.nextTime = time.Duration((vp.BudgetMs + spec.CommLatencyMs) * float64(time.Millisecond))
	}
	return e
}

// Escalates says items of this variant may be sent on: it is a cascade's first under the plan.
func (t *Table) Escalates() bool { return t.esc != nil }

// Threshold is the threshold items are sent on below: the plan's, or the gear UseGear put in force (0: no cascade).
func (t *Table) Threshold() float64 {
	if t.esc == nil {
		return 0
	}
	return t.esc.threshold
}

// UseGear puts threshold in force, the gear its replica's switch chose (pkg/gears) in place of the plan's: a table
// without a cascade ignores it.
func (t *Table) UseGear(threshold float64) {
	if t.esc != nil {
		t.esc.threshold, t.esc.geared = threshold, true
	}
}

// Geared says a gear chose the threshold in force: the items it decides carry it (their accuracy is its level's).
func (t *Table) Geared() bool { return t.esc != nil && t.esc.geared }

// Escalate is where an item this variant answered with confidence conf goes on to, with left to its deadline: the
// cascade's next variant when its confidence is below the plan's threshold (the same path as a reroute: its deadline
// stays) and the next variant's time fits in what is left; "" when the item is a leaf here: confident enough, no
// cascade, or too late for the next, in which case this answer is better than none (late reports it).
func (t *Table) Escalate(conf float64, left time.Duration) (next string, late bool) {
	e := t.esc
	if e == nil || !(conf < e.threshold) {
		return "", false
	}
	if left < e.nextTime {
		return "", true
	}
	return e.next, false
}
