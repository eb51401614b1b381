package profiler

import (
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// reading is a recogniser's reading of one line: right when it reads it exactly.
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

// keepCrops keeps recogniser variant's reading of the items detector found (in the documents' order), each right
// when it matches a true line (ocr.MatchLines) and reads it exactly; lines is how many true lines there are.
func (p *run) keepCrops(variant, detector string, rs []reading, lines int) {
	if p.crops == nil {
		p.crops = map[[2]string][]reading{}
	}
	p.crops[[2]string{variant, detector}] = rs
	p.lines = lines
}

// cascadeLevels measures the recogniser task's cascade, if it declares one: on the true lines (the task's levels),
// and on each detector's items (its path's, pipeline.CascadePath), which is what the cascade serves through that
// detector: its items escalate as its crops' confidences say, and what a line lost by the detector costs is in them.
func (p *run) cascadeLevels(det, rec *pipeline.Task) []pipeline.CascadeProfile {
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
	cp := pipeline.CascadeProfile{Task: rec.Name, Levels: levels(first, next, thresholds, 1)}
	for _, d := range det.Variants {
		first, next := p.crops[[2]string{c.Variants[0], d.Name}], p.crops[[2]string{c.Variants[1], d.Name}]
		if len(first) == 0 || len(first) != len(next) || p.lines == 0 {
			continue
		}
		// A path accuracy counts the true lines read exactly over all true lines: over the items, times items/lines.
		cp.Paths = append(cp.Paths, pipeline.CascadePath{
			Path:   []string{wire.VariantKey{Task: det.Name, Variant: d.Name}.String()},
			Levels: levels(first, next, thresholds, float64(len(first))/float64(p.lines))})
	}
	return []pipeline.CascadeProfile{cp}
}

// levels is, at each threshold, the share of items the first variant is less sure of (sent on), and the share of
// the others it reads right and of those sent on the next reads right, each times scale.
func levels(first, next []reading, thresholds []float64, scale float64) []pipeline.CascadeLevel {
	var out []pipeline.CascadeLevel
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
		out = append(out, pipeline.CascadeLevel{Threshold: th, Escalation: round(ratio(sent, len(first)), 4),
			Accuracy: round(scale*ratio(keptRight, kept), 4), NextAccuracy: round(scale*ratio(sentRight, sent), 4)})
	}
	return out
}
