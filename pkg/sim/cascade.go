package sim

// A cascade's steps in the data plane: sending an item on, the gear its leaf ran at, a real model's confidence, and
// a batch's max batch under gears.

import (
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/hop"
)

// escalate sends on an item a cascade's first variant answered, as a worker does (hop.Table.Escalate): its
// confidence drawn as the emulated executor draws it (levelConfidence for a real model's), the item delivered to
// the cascade's next variant one hop later and counted for the heartbeat. It says whether the item went on.
func (s *sim) escalate(p *pipe, h *variantQueue, t *hop.Table, r *request, den uint64, node int32,
	left time.Duration) bool {
	if !t.Escalates() {
		return false
	}
	conf := 0.0
	if h.exec.DrawsConfidence() {
		conf = h.exec.Confidence(s.rng)
	} else {
		conf = s.levelConfidence(p, h, node, t.Threshold())
	}
	next, _ := t.Escalate(conf, left)
	if next == "" {
		return false
	}
	h.subs.Escalated++
	m := s.send(p, p.queueIdx[p.spec.Tasks[h.task].Name][next], r, 1, den, node)
	if t.Geared() {
		m.gear = t.Threshold()
	}
	return true
}

// leafGear is the threshold a leaf's item ran its cascade at when a gear chose it (0: the plan's): its message's,
// sent on under one, or its server's, a geared first variant that kept it.
func leafGear(sv *server, m *message) float64 {
	if m.gear > 0 {
		return m.gear
	}
	if sv.gear != nil {
		return sv.table.Threshold()
	}
	return 0
}

// levelConfidence is a confidence for an item of a real model's cascade, whose confidences the simulator cannot draw
// (the emulated executor answers 1, so nothing would go on while the leaves count the kept items' accuracy): below
// the threshold in force (the plan's, or its gear's) with the profile's measured escalation at it (the item's path's level, cascade.paths, where
// measured; else the task's), above it otherwise.
func (s *sim) levelConfidence(p *pipe, h *variantQueue, node int32, th float64) float64 {
	task := p.spec.Tasks[h.task]
	if _, ok := p.plan.Cascades[task.Name]; !ok || task.Cascade == nil {
		return 1
	}
	path := p.trie.path[node]
	l, ok := task.Cascade.PathLevel(path[:len(path)-1], th)
	if !ok {
		l = task.Cascade.Level(th)
	}
	if s.rng.Float64() < l.Escalation {
		return 0
	}
	return 1
}

// minSet is the smaller of limit and batch, batch when limit is not set (0).
func minSet(limit, batch int) int {
	if limit == 0 {
		return batch
	}
	return min(limit, batch)
}
