// Workloads made of parts: a linear ramp, parts one after another ("+"), and a part's own burstiness (":cv=X"), for
// InferLine's changes of rate and of CV mid-run (its figures 10 and 11).

package workload

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// parseRamp reads "FROM:TO:DURATION": the rate moving linearly from FROM to TO over DURATION, a step a second.
func parseRamp(rest string) (*Workload, error) {
	f := strings.Split(rest, ":")
	if len(f) != 3 {
		return nil, errors.New("want ramp:FROM:TO:DURATION")
	}
	from, err1 := strconv.ParseFloat(f[0], 64)
	to, err2 := strconv.ParseFloat(f[1], 64)
	d, err3 := time.ParseDuration(f[2])
	if err := errors.Join(err1, err2, err3); err != nil || from < 0 || to < 0 || math.IsInf(from, 0) ||
		math.IsInf(to, 0) || d < time.Second {
		return nil, errors.New("want ramp:FROM:TO:DURATION, rates >= 0 and a DURATION of at least 1s")
	}
	return Ramp(from, to, d), nil
}

// Ramp is a demand that moves linearly from `from` to `to` QPS over d, a step a second (each step at its middle's
// rate).
func Ramp(from, to float64, d time.Duration) *Workload {
	n := max(1, int(math.Round(d.Seconds())))
	w := &Workload{Name: fmt.Sprintf("ramp %g-%g QPS over %v", from, to, d), Step: time.Second,
		Rates: make([]float64, n)}
	for i := range w.Rates {
		w.Rates[i] = from + (to-from)*(float64(i)+0.5)/float64(n)
	}
	return w
}

// cutCV splits a part's trailing ":cv=X" off: the part, and its coefficient of variation (0: none given).
func cutCV(part string) (string, float64, error) {
	i := strings.LastIndex(part, ":cv=")
	if i < 0 {
		return part, 0, nil
	}
	v := part[i+len(":cv="):]
	cv, err := strconv.ParseFloat(v, 64)
	if err != nil || !(cv > 0) || math.IsInf(cv, 0) {
		return "", 0, fmt.Errorf("cv=%s: want a coefficient of variation > 0", v)
	}
	return part[:i], cv, nil
}

// Concat is the parts one after another, a step a second; each part keeps its own coefficient of variation (its CV,
// or cv where it has none). A replayed trace (exact times) cannot be a part, nor a part whose steps are not whole
// seconds.
func Concat(parts []*Workload, cv float64) (*Workload, error) {
	w := &Workload{Step: time.Second, CV: cv}
	var names []string
	mixed := false
	for _, p := range parts {
		if p.Times != nil {
			return nil, fmt.Errorf("%s: a trace replayed as is cannot be a part of a workload", p.Name)
		}
		if p.Step%time.Second != 0 {
			return nil, fmt.Errorf("%s: steps of %v: a part's steps must be whole seconds", p.Name, p.Step)
		}
		pcv := p.CV
		if pcv == 0 {
			pcv = cv
		}
		mixed = mixed || pcv != cv
		for t := time.Duration(0); t < p.Duration(); t += time.Second {
			w.Rates = append(w.Rates, p.RateAt(t))
			w.CVs = append(w.CVs, pcv)
		}
		name := p.Name
		if p.CV > 0 {
			name += fmt.Sprintf(" at CV %g", p.CV)
		}
		names = append(names, name)
	}
	if !mixed {
		w.CVs = nil
	}
	w.Name = strings.Join(names, ", then ")
	return w, nil
}

// parseParts reads a workload of parts (Parse's "+"), each with an optional ":cv=X".
func parseParts(s string, cv float64) (*Workload, error) {
	var parts []*Workload
	for _, text := range strings.Split(s, "+") {
		text, pcv, err := cutCV(strings.TrimSpace(text))
		if err != nil {
			return nil, fmt.Errorf("workload %q: %w", s, err)
		}
		p, err := parseOne(text)
		if err != nil {
			return nil, err
		}
		p.CV = pcv
		parts = append(parts, p)
	}
	if len(parts) == 1 {
		p := parts[0]
		if p.CV == 0 && p.Times == nil {
			p.CV = cv
		}
		return p, nil
	}
	return Concat(parts, cv)
}

// cvAt is the coefficient of variation of step i: CVs[i] when the parts have their own, else CV.
func (w *Workload) cvAt(i int) float64 {
	if i < len(w.CVs) {
		return w.CVs[i]
	}
	return w.CV
}
