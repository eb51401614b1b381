package profiler

import (
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// reading is a recogniser's reading of one true line: right when it reads it exactly.
type reading struct {
	right bool
	conf  float64
}

// DefaultThresholds are the candidate thresholds of a cascade that lists none.
var DefaultThresholds = []float64{0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99}

// keepTruth keeps recogniser variant's reading of the true lines (texts and confidences in the documents' order).
func (p *run) keepTruth(variant string, texts []string, confs []float64, docs []ocr.Document) {
	if p.truth == nil {
		p.truth = map[string][]reading{}
	}
	var rs []reading
	k := 0
	for _, d := range docs {
		for _, l := range d.Lines {
			rs = append(rs, reading{right: texts[k] == l.Text, conf: confs[k]})
			k++
		}
	}
	p.truth[variant] = rs
}

// cascadeLevels measures the recogniser task's cascade, if it declares one, on the true lines: at each candidate
// threshold, the share of lines the first variant is less sure of (sent on), the share of the others it reads
// exactly, and the share of those sent on the next reads exactly.
func (p *run) cascadeLevels(rec *pipeline.Task) []pipeline.CascadeProfile {
	c := rec.Cascade
	if c == nil {
		return nil
	}
	first, next := p.truth[c.Variants[0]], p.truth[c.Variants[1]]
	if len(first) == 0 || len(first) != len(next) {
		return nil
	}
	thresholds := c.Thresholds
	if len(thresholds) == 0 {
		thresholds = DefaultThresholds
	}
	cp := pipeline.CascadeProfile{Task: rec.Name}
	for _, th := range thresholds {
		var sent, kept, keptRight, sentRight int
		for i, r := range first {
			if r.conf < th {
				sent++
				if next[i].right {
					sentRight++
				}
				continue
			}
			kept++
			if r.right {
				keptRight++
			}
		}
		cp.Levels = append(cp.Levels, pipeline.CascadeLevel{Threshold: th, Escalation: round(ratio(sent, len(first)), 4),
			Accuracy: round(ratio(keptRight, kept), 4), NextAccuracy: round(ratio(sentRight, sent), 4)})
	}
	return []pipeline.CascadeProfile{cp}
}
