package plan

import (
	"fmt"
	"math"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// checkCascades checks that each task the plan serves by its cascade has one, with a threshold in [0, 1], and
// hosts both its variants.
func (p *Plan) checkCascades(spec *pipeline.Spec) error {
	for task, th := range p.Cascades {
		t := spec.Task(task)
		if t == nil || t.Cascade == nil {
			return fmt.Errorf("cascade of %q: the pipeline declares none there", task)
		}
		if !(th >= 0 && th <= 1) {
			return fmt.Errorf("cascade of %q: threshold %v, want one in [0, 1]", task, th)
		}
		for _, v := range t.Cascade.Variants {
			if p.Find(task, v) == nil {
				return fmt.Errorf("cascade of %q: %s/%s is not hosted", task, task, v)
			}
		}
	}
	return nil
}

// Escalation is where an item of task/variant that answered with confidence conf goes on to under p: its cascade's
// next variant when the plan serves task by its cascade, variant is the cascade's first and conf is below the
// threshold; "" otherwise (the item is a leaf).
func (p *Plan) Escalation(spec *pipeline.Spec, task, variant string, conf float64) string {
	if p == nil {
		return ""
	}
	th, on := p.Cascades[task]
	if !on || math.IsNaN(conf) || conf >= th {
		return ""
	}
	t := spec.Task(task)
	if t == nil || t.Cascade == nil || t.Cascade.Variants[0] != variant {
		return ""
	}
	return t.Cascade.Next(variant)
}

// LeafAccuracy is the end-to-end accuracy of a finished leaf's path under p: its cascade's level when it ran on a
// cascade (pipeline.Spec.CascadePathAccuracy), else the path's.
func (p *Plan) LeafAccuracy(spec *pipeline.Spec, path []string) float64 {
	if p == nil {
		return spec.PathAccuracyOf(path)
	}
	return spec.CascadePathAccuracy(path, p.Cascades)
}
