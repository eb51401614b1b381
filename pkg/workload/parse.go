package workload

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Syntax is the workload syntax, for flag help and errors.
const Syntax = `constant:QPS:DURATION | steps:QPS:DURATION,QPS:DURATION,... | ramp:FROM:TO:DURATION (linear) | ` +
	`diurnal:MIN:MAX:DURATION[:SHIFT] (the day started SHIFT later: peaks apart for pipelines sharing a cluster) | ` +
	`trace:FILE (replayed as is) | trace:FILE:MIN:MAX[:DURATION] (its shape, scaled to MIN-MAX QPS and ` +
	`stretched or compressed to DURATION); parts one after another joined by + (constant:150:60s+ramp:150:250:30s), ` +
	`each with its own coefficient of variation after :cv= (constant:150:60s+constant:150:60s:cv=4)`

// Parse reads a workload description (see Syntax); cv is the arrival process's coefficient of variation (1:
// Poisson) where a part gives none, ignored by a trace replayed as is.
func Parse(s string, cv float64) (*Workload, error) {
	w, err := parseParts(s, cv)
	if err != nil {
		return nil, err
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return w, nil
}

// parseOne reads one part of a workload description (no "+", no ":cv=").
func parseOne(s string) (*Workload, error) {
	kind, rest, _ := strings.Cut(s, ":")
	var w *Workload
	var err error
	switch kind {
	case "constant":
		var steps []Step
		if steps, err = ParseSteps(rest); err == nil && len(steps) != 1 {
			err = errors.New("want one QPS:DURATION")
		}
		if err == nil {
			w = Constant(steps[0].QPS, steps[0].Duration)
		}
	case "steps":
		var steps []Step
		if steps, err = ParseSteps(rest); err == nil {
			w = Stepped(steps)
		}
	case "ramp":
		w, err = parseRamp(rest)
	case "diurnal":
		w, err = parseDiurnal(rest)
	case "trace":
		w, err = parseTrace(rest)
	default:
		err = fmt.Errorf("unknown kind %q", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("workload %q: %w (want %s)", s, err, Syntax)
	}
	return w, nil
}

// Step is one constant rate of a stepped workload.
type Step struct {
	QPS      float64
	Duration time.Duration
}

// ParseSteps reads "QPS:DURATION,QPS:DURATION,...".
func ParseSteps(s string) ([]Step, error) {
	var out []Step
	for _, part := range strings.Split(s, ",") {
		q, d, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("steps %q: want QPS:DURATION,... (e.g. 100:30s,200:30s)", s)
		}
		qps, err := strconv.ParseFloat(q, 64)
		if err != nil || qps <= 0 || math.IsInf(qps, 0) {
			return nil, fmt.Errorf("rate %q: want a positive number", q)
		}
		dur, err := time.ParseDuration(d)
		if err != nil || dur <= 0 {
			return nil, fmt.Errorf("duration %q: want a positive duration such as 30s", d)
		}
		out = append(out, Step{QPS: qps, Duration: dur})
	}
	return out, nil
}

// Stepped is a demand that holds each step's rate for its duration, in steps of one second (durations are
// rounded to whole seconds, at least one).
func Stepped(steps []Step) *Workload {
	w := &Workload{Name: "steps", Step: time.Second}
	var names []string
	for _, s := range steps {
		n := max(1, int(math.Round(s.Duration.Seconds())))
		for range n {
			w.Rates = append(w.Rates, s.QPS)
		}
		names = append(names, fmt.Sprintf("%g:%s", s.QPS, s.Duration))
	}
	w.Name = "steps " + strings.Join(names, ",")
	return w
}

func parseDiurnal(rest string) (*Workload, error) {
	f := strings.Split(rest, ":")
	if len(f) != 3 && len(f) != 4 {
		return nil, errors.New("want diurnal:MIN:MAX:DURATION[:SHIFT]")
	}
	lo, err1 := strconv.ParseFloat(f[0], 64)
	hi, err2 := strconv.ParseFloat(f[1], 64)
	d, err3 := time.ParseDuration(f[2])
	if err := errors.Join(err1, err2, err3); err != nil || lo < 0 || hi < lo || d < time.Second {
		return nil, errors.New("want 0 <= MIN <= MAX and a DURATION of at least 1s")
	}
	w := Diurnal(lo, hi, d, stepFor(d))
	if len(f) == 4 {
		shift, err := time.ParseDuration(f[3])
		if err != nil || shift < 0 || shift >= d {
			return nil, fmt.Errorf("SHIFT %q: want a duration from 0 to under %v", f[3], d)
		}
		k := int(shift / w.Step)
		w.Rates = append(w.Rates[k:], w.Rates[:k]...)
		w.Name += fmt.Sprintf(" shifted %v", shift)
	}
	return w, nil
}

// stepFor is the step of a compressed curve of duration d: about 1000 steps, never under a second.
func stepFor(d time.Duration) time.Duration {
	return max(time.Second, (d / 1000).Round(time.Second))
}

func parseTrace(rest string) (*Workload, error) {
	f := strings.Split(rest, ":")
	file := f[0]
	if file == "" || (len(f) != 1 && len(f) != 3 && len(f) != 4) {
		return nil, errors.New("want trace:FILE or trace:FILE:MIN:MAX[:DURATION]")
	}
	times, counts, err := ReadTraceFile(file)
	if err != nil {
		return nil, err
	}
	name := "trace " + filepath.Base(file)
	if len(f) == 1 {
		if times == nil {
			// Counts per second only: arrivals spread as a Poisson process at each second's rate.
			return &Workload{Name: name, Step: time.Second, Rates: counts}, nil
		}
		return &Workload{Name: name, Step: time.Second, Rates: counts, Times: times}, nil
	}
	lo, err1 := strconv.ParseFloat(f[1], 64)
	hi, err2 := strconv.ParseFloat(f[2], 64)
	if err := errors.Join(err1, err2); err != nil || lo < 0 || hi < lo {
		return nil, errors.New("want 0 <= MIN <= MAX")
	}
	d := time.Duration(len(counts)) * time.Second
	if len(f) == 4 {
		if d, err = time.ParseDuration(f[3]); err != nil || d < time.Second {
			return nil, fmt.Errorf("duration %q: want at least 1s", f[3])
		}
	}
	return Shaped(name, counts, lo, hi, d), nil
}

// Shaped turns per-second counts into a demand curve of duration d with the same shape: smoothed over a minute
// (a trace's second-to-second noise is the arrival process's business, not the curve's), resampled to d's steps,
// and min-max scaled to lo-hi QPS.
func Shaped(name string, counts []float64, lo, hi float64, d time.Duration) *Workload {
	smooth := Smooth(counts, 60)
	step := stepFor(d)
	n := max(1, int(d/step))
	rates := make([]float64, n)
	for i := range rates {
		// The mean of the trace seconds this step covers.
		a := int(float64(i) / float64(n) * float64(len(smooth)))
		b := max(a+1, int(float64(i+1)/float64(n)*float64(len(smooth))))
		sum := 0.0
		for _, v := range smooth[a:min(b, len(smooth))] {
			sum += v
		}
		rates[i] = sum / float64(min(b, len(smooth))-a)
	}
	return &Workload{Name: fmt.Sprintf("%s scaled to %g-%g QPS", name, lo, hi), Step: step,
		Rates: ScaleMinMax(rates, lo, hi)}
}

// ReadTraceFile reads a trace (see ReadTrace).
func ReadTraceFile(path string) (times []time.Duration, counts []float64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	times, counts, err = ReadTrace(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return times, counts, nil
}

// Trace timestamp layouts, besides seconds as a number.
var timeLayouts = []string{"2006-01-02 15:04:05.999999999", time.RFC3339Nano}

// ReadTrace reads a CSV trace, with or without a header line:
//   - arrival timestamps in the first column, as seconds (a number) or as date-times ("2023-11-16
//     18:15:46.68", RFC 3339): it returns the times since the first arrival, sorted, and their counts per second;
//   - or, when the header names a column "count", the number of arrivals in each second, one row per second: it
//     returns the counts and no times.
func ReadTrace(r io.Reader) (times []time.Duration, counts []float64, err error) {
	cr := csv.NewReader(bufio.NewReader(r))
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	countCol := -1
	var stamps []time.Time
	var secs []float64
	line := 0
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		line++
		if len(rec) == 0 || strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if line == 1 {
			if _, numErr := strconv.ParseFloat(strings.TrimSpace(rec[0]), 64); numErr != nil && parseStamp(rec[0]).IsZero() {
				for i, h := range rec {
					if strings.EqualFold(strings.TrimSpace(h), "count") {
						countCol = i
					}
				}
				continue // a header
			}
		}
		if countCol >= 0 {
			if countCol >= len(rec) {
				return nil, nil, fmt.Errorf("line %d: no count column", line)
			}
			c, err := strconv.ParseFloat(strings.TrimSpace(rec[countCol]), 64)
			if err != nil || c < 0 {
				return nil, nil, fmt.Errorf("line %d: count %q: want a number >= 0", line, rec[countCol])
			}
			counts = append(counts, c)
			continue
		}
		v := strings.TrimSpace(rec[0])
		if s, err := strconv.ParseFloat(v, 64); err == nil && len(stamps) == 0 {
			secs = append(secs, s)
			continue
		}
		t := parseStamp(v)
		if t.IsZero() || len(secs) > 0 {
			return nil, nil, fmt.Errorf("line %d: timestamp %q: want seconds or a date-time such as 2023-11-16 18:15:46.68", line, v)
		}
		stamps = append(stamps, t)
	}
	if countCol >= 0 {
		if len(counts) == 0 {
			return nil, nil, errors.New("no counts")
		}
		return nil, counts, nil
	}
	for _, t := range stamps {
		secs = append(secs, float64(t.Sub(stamps[0]))/float64(time.Second))
	}
	if len(secs) == 0 {
		return nil, nil, errors.New("no arrivals")
	}
	sort.Float64s(secs)
	times = make([]time.Duration, len(secs))
	counts = make([]float64, int(secs[len(secs)-1]-secs[0])+1)
	for i, s := range secs {
		times[i] = time.Duration((s - secs[0]) * float64(time.Second))
		counts[int(s-secs[0])]++
	}
	return times, counts, nil
}

func parseStamp(v string) time.Time {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, strings.TrimSpace(v)); err == nil {
			return t
		}
	}
	return time.Time{}
}
