// Judging a soak: per fault and pipeline, what the clients saw around it; per pipeline, the losses and the
// violations outside the faults' recovery windows; per process, its memory and goroutines after the warm-up.

package chaos

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// SoakRow is one fault seen by one pipeline's client: from 30 s before the fault to 30 s before the next. It fails
// on a request lost that no victim held, or a duplicate reply; its recovery is said, and the violations past its
// window count in the pipeline's total.
type SoakRow struct {
	Event    int    `json:"event"` // index in SoakResult.Events
	Pipeline string `json:"pipeline"`
	Sent     int    `json:"sent"`
	OK       int    `json:"ok"`
	Lost     int    `json:"lost"`
	// Unexplained are the lost requests sent outside every fault's loss window.
	Unexplained   int      `json:"lost_unexplained"`
	Duplicates    int      `json:"duplicates"`
	ViolationsPct float64  `json:"violations_pct"` // from the fault to the next one
	BaselinePct   float64  `json:"baseline_violations_pct"`
	RecoveryS     float64  `json:"recovery_s"` // -1: not settled by the next fault
	SilenceS      int      `json:"silence_s"`
	Failures      []string `json:"failures,omitempty"`
}

// SoakTotal is one pipeline's whole measurement.
type SoakTotal struct {
	Pipeline    string  `json:"pipeline"`
	QPS         float64 `json:"qps"`
	Sent        int     `json:"sent"`
	OK          int     `json:"ok"`
	Lost        int     `json:"lost"`
	Unexplained int     `json:"lost_unexplained"`
	Duplicates  int     `json:"duplicates"`
	Violations  int     `json:"violations"`
	// Outside the faults' recovery windows: the requests sent and the violations among them.
	OutsideSent       int      `json:"outside_sent"`
	OutsideViolations int      `json:"outside_violations"`
	Failures          []string `json:"failures,omitempty"`
}

// MemoryRow is one process's life (one pid) in the soak: the medians of its memory and goroutines in the first
// window after its warm-up and in its last window.
type MemoryRow struct {
	Process string `json:"process"`
	PID     int    `json:"pid"`
	// FromS and ToS bound its samples, in seconds from the measurement's start.
	FromS, ToS     float64 `json:"-"`
	Judged         bool    `json:"judged"` // false: too short a life for two windows after its warm-up
	RSSFirstKiB    int64   `json:"rss_first_kib"`
	RSSLastKiB     int64   `json:"rss_last_kib"`
	GoroutineFirst int     `json:"goroutines_first"`
	GoroutineLast  int     `json:"goroutines_last"`
	// JudgedBy says what judges the row's memory and goroutines if not the row: a node's are the cluster's
	// (nats-cluster, the nodes summed).
	JudgedBy string   `json:"judged_by,omitempty"`
	Failures []string `json:"failures,omitempty"`
}

// MaxGrowth is how much a process's memory or goroutines may grow from the first window after its warm-up to its
// last: flat within 10%.
const MaxGrowth = 0.10

// SoakVerdict is a soak judged.
type SoakVerdict struct {
	Rows   []SoakRow   `json:"rows"`
	Totals []SoakTotal `json:"totals"`
	Memory []MemoryRow `json:"memory"`
	Pass   bool        `json:"pass"`
}

// Judge holds the soak to the bounds: nothing lost but the requests a fault's victim held in flight, no
// duplicate reply, no crash, violations under 1% outside the recovery windows, every process's memory and
// goroutines flat after its warm-up.
func (r *SoakResult) Judge() SoakVerdict {
	var v SoakVerdict
	names := make([]string, 0, len(r.Loads))
	for n := range r.Loads {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v.Rows = append(v.Rows, r.faultRows(n)...)
		v.Totals = append(v.Totals, r.total(n))
	}
	v.Memory = r.memory()
	v.Pass = len(r.Crashes) == 0
	for _, row := range v.Rows {
		v.Pass = v.Pass && len(row.Failures) == 0
	}
	for _, t := range v.Totals {
		v.Pass = v.Pass && len(t.Failures) == 0
	}
	for _, m := range v.Memory {
		v.Pass = v.Pass && len(m.Failures) == 0
	}
	return v
}

// secondAt is the start of a series' second i.
func secondAt(sum loadSummary, i int) time.Time {
	return time.UnixMilli(sum.SeriesStartUnixMs).Add(time.Duration(i) * time.Second)
}

// inSeries is t in seconds into a pipeline's series.
func inSeries(sum loadSummary, t time.Time) float64 {
	return float64(t.UnixMilli()-sum.SeriesStartUnixMs) / 1000
}

// explained says whether a request sent at t may be lost: it was in flight at a fault's victim.
func (r *SoakResult) explained(t time.Time) bool {
	return slices.ContainsFunc(r.Events, func(e SoakEvent) bool {
		return !e.LossFrom.IsZero() && !t.Before(e.LossFrom) && !t.After(e.LossTo)
	})
}

// inRecovery says whether second [t, t+1s) of sending meets a fault's recovery window: from 1 s before the fault
// (requests already in flight) to Recovery after its victim's return.
func (r *SoakResult) inRecovery(t time.Time) bool {
	return slices.ContainsFunc(r.Events, func(e SoakEvent) bool {
		return t.Add(time.Second).After(e.At.Add(-time.Second)) && t.Before(e.End.Add(r.Config.Recovery))
	})
}

// faultRows are a pipeline's rows, one per fault: from BeforeS before it to BeforeS before the next.
func (r *SoakResult) faultRows(name string) []SoakRow {
	const beforeS = 30
	sum := r.Loads[name]
	var rows []SoakRow
	for k, e := range r.Events {
		faultAt := inSeries(sum, e.At)
		from := max(0, int(faultAt)-beforeS)
		to := len(sum.Series)
		if k+1 < len(r.Events) {
			to = min(to, max(from, int(inSeries(sum, r.Events[k+1].At))-beforeS))
		}
		seg := sum.Series[from:to]
		row := SoakRow{Event: k, Pipeline: name, RecoveryS: -1}
		for _, s := range seg {
			row.Sent, row.OK, row.Lost, row.Duplicates = row.Sent+s.Sent, row.OK+s.OK, row.Lost+s.Lost, row.Duplicates+s.Duplicates
		}
		for _, ms := range sum.LostSentMs {
			if i := int(ms / 1000); i >= from && i < to && !r.explained(secondAt(sum, 0).Add(time.Duration(ms)*time.Millisecond)) {
				row.Unexplained++
			}
		}
		at := faultAt - float64(from)
		sent, viol := violationsAfter(seg, int(at))
		if sent > 0 {
			row.ViolationsPct = 100 * float64(viol) / float64(sent)
		}
		row.BaselinePct = 100 * baseline(seg, at)
		// Recovery within the fault's window (what comes later counts outside it, in the totals).
		window := seg[:min(len(seg), max(0, int(math.Ceil(inSeries(sum, e.End.Add(r.Config.Recovery))))-from+1))]
		if rec, ok := Recovery(window, at, 0.01, RecoveryWindow); ok {
			row.RecoveryS = rec
		}
		_, row.SilenceS = silence(seg, at)
		if row.Unexplained > 0 {
			row.Failures = append(row.Failures, fmt.Sprintf("%d requests lost that no victim held", row.Unexplained))
		}
		if row.Duplicates > 0 {
			row.Failures = append(row.Failures, fmt.Sprintf("%d duplicate replies", row.Duplicates))
		}
		rows = append(rows, row)
	}
	return rows
}

// total is a pipeline's whole measurement, judged: nothing lost unexplained, no duplicate, violations under 1% of
// the requests sent outside the recovery windows.
func (r *SoakResult) total(name string) SoakTotal {
	sum := r.Loads[name]
	t := SoakTotal{Pipeline: name, QPS: r.Config.Loads[name], Sent: sum.Sent, OK: sum.OK, Lost: sum.Lost,
		Duplicates: sum.Duplicates}
	for i, s := range sum.Series {
		t.Violations += s.Violations
		if !r.inRecovery(secondAt(sum, i)) {
			t.OutsideSent, t.OutsideViolations = t.OutsideSent+s.Sent, t.OutsideViolations+s.Violations
		}
	}
	for _, ms := range sum.LostSentMs {
		if !r.explained(secondAt(sum, 0).Add(time.Duration(ms) * time.Millisecond)) {
			t.Unexplained++
		}
	}
	if t.Unexplained > 0 {
		t.Failures = append(t.Failures, fmt.Sprintf("%d requests lost that no fault's victim held in flight", t.Unexplained))
	}
	if t.Duplicates > 0 {
		t.Failures = append(t.Failures, fmt.Sprintf("%d duplicate replies", t.Duplicates))
	}
	if t.OutsideSent == 0 || float64(t.OutsideViolations) >= 0.01*float64(t.OutsideSent) {
		t.Failures = append(t.Failures, fmt.Sprintf("violations outside the recovery windows %d of %d requests, not under 1%%",
			t.OutsideViolations, t.OutsideSent))
	}
	return t
}

// memory judges each process's life (its samples under one pid): its warm-up starts at the measurement's start, or
// at its restart; the medians of the first window after it and of its last window must be within MaxGrowth.
func (r *SoakResult) memory() []MemoryRow {
	type life struct {
		process string
		pid     int
	}
	lives := map[life][]Sample{}
	var order []life
	for _, s := range r.Samples {
		l := life{s.Process, s.PID}
		if _, ok := lives[l]; !ok {
			order = append(order, l)
		}
		lives[l] = append(lives[l], s)
	}
	slices.SortStableFunc(order, func(a, b life) int { return strings.Compare(a.process, b.process) })
	warm, win := r.Config.MemWarmup, r.Config.MemWindow
	var rows []MemoryRow
	for _, l := range order {
		ss := lives[l]
		first, last := ss[0].At, ss[len(ss)-1].At
		start := first
		if start.Before(r.Start) {
			start = r.Start // the system's first processes: warmed up from the measurement's start
		}
		row := MemoryRow{Process: l.process, PID: l.pid, FromS: first.Sub(r.Start).Seconds(), ToS: last.Sub(r.Start).Seconds()}
		a0, a1 := start.Add(warm), start.Add(warm+win)
		b0 := last.Add(-win)
		if a1.After(b0) {
			rows = append(rows, row)
			continue
		}
		row.Judged = true
		var rssA, rssB, grA, grB []float64
		for _, s := range ss {
			switch {
			case !s.At.Before(a0) && s.At.Before(a1):
				rssA, grA = appendSample(rssA, grA, s)
			case !s.At.Before(b0):
				rssB, grB = appendSample(rssB, grB, s)
			}
		}
		if len(rssA) > 0 && len(rssB) > 0 {
			row.RSSFirstKiB, row.RSSLastKiB = int64(median(rssA)), int64(median(rssB))
		}
		if len(grA) > 0 && len(grB) > 0 {
			row.GoroutineFirst, row.GoroutineLast = int(math.Round(median(grA))), int(math.Round(median(grB)))
		}
		// A node's memory and goroutines follow the connections and stream leaders it holds, which move between
		// nodes as one restarts and stay where they moved: the cluster's sum is judged instead (a node grew 11-13%
		// when a restarted one's clients came to it, the sum did not).
		if ss[0].Node {
			row.JudgedBy = "the cluster's"
			rows = append(rows, row)
			continue
		}
		if g := growth(median(rssA), median(rssB)); g > MaxGrowth {
			row.Failures = append(row.Failures, fmt.Sprintf("resident memory grew %.0f%%", 100*g))
		}
		if g := growth(median(grA), median(grB)); g > MaxGrowth {
			row.Failures = append(row.Failures, fmt.Sprintf("goroutines grew %.0f%%", 100*g))
		}
		if len(grA) == 0 || len(grB) == 0 {
			row.Failures = append(row.Failures, "no goroutine count read in a window")
		}
		rows = append(rows, row)
	}
	return rows
}

func appendSample(rss, gr []float64, s Sample) ([]float64, []float64) {
	if s.RSSKiB > 0 {
		rss = append(rss, float64(s.RSSKiB))
	}
	if s.Goroutines >= 0 {
		gr = append(gr, float64(s.Goroutines))
	}
	return rss, gr
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// growth is b over a, less one; 0 when either is unknown.
func growth(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || a <= 0 {
		return 0
	}
	return b/a - 1
}

// WriteSoak prints a soak's verdict: a row per fault and pipeline, the totals, and each process's memory and
// goroutines.
func WriteSoak(w io.Writer, r *SoakResult, v SoakVerdict) {
	fmt.Fprintf(w, "%-8s %-16s %-10s %-10s %6s %6s %4s %4s %4s %7s %8s %7s %7s  %s\n", "at", "fault", "victim",
		"pipeline", "sent", "ok", "lost", "unex", "dup", "viol", "baseline", "recov s", "silence", "result")
	for _, row := range v.Rows {
		e := r.Events[row.Event]
		rec := "never"
		if row.RecoveryS >= 0 {
			rec = fmt.Sprintf("%.1f", row.RecoveryS)
		}
		fmt.Fprintf(w, "%-8s %-16s %-10s %-10s %6d %6d %4d %4d %4d %6.2f%% %7.2f%% %7s %7d  %s\n",
			e.At.Sub(r.Start).Round(time.Second), e.Fault, e.Target, row.Pipeline, row.Sent, row.OK, row.Lost,
			row.Unexplained, row.Duplicates, row.ViolationsPct, row.BaselinePct, rec, row.SilenceS, result(row.Failures))
	}
	for _, e := range r.Events {
		fmt.Fprintf(w, "  %s %s: %s; back after %.1f s\n", e.At.Sub(r.Start).Round(time.Second), e.Fault,
			strings.Join(e.Notes, "; "), e.End.Sub(e.At).Seconds())
	}
	fmt.Fprintf(w, "\n%-10s %5s %7s %7s %5s %5s %4s %7s %22s  %s\n", "pipeline", "qps", "sent", "ok", "lost", "unex",
		"dup", "viol", "outside recovery", "result")
	for _, t := range v.Totals {
		fmt.Fprintf(w, "%-10s %5.0f %7d %7d %5d %5d %4d %6.2f%% %6d of %7d %5.2f%%  %s\n", t.Pipeline, t.QPS, t.Sent,
			t.OK, t.Lost, t.Unexplained, t.Duplicates, pct(t.Violations, t.Sent), t.OutsideViolations, t.OutsideSent,
			pct(t.OutsideViolations, t.OutsideSent), result(t.Failures))
	}
	fmt.Fprintf(w, "\n%-12s %8s %13s %9s %9s %7s %12s %7s  %s\n", "process", "pid", "life s", "rss MiB", "then MiB",
		"change", "goroutines", "change", "result")
	for _, m := range v.Memory {
		life := fmt.Sprintf("%.0f-%.0f", m.FromS, m.ToS)
		if !m.Judged {
			fmt.Fprintf(w, "%-12s %8d %13s  not judged: under %v of warm-up and two %v windows\n", m.Process, m.PID,
				life, r.Config.MemWarmup, r.Config.MemWindow)
			continue
		}
		rss := fmt.Sprintf("%9.1f %9.1f %+6.1f%%", float64(m.RSSFirstKiB)/1024, float64(m.RSSLastKiB)/1024,
			100*growth(float64(m.RSSFirstKiB), float64(m.RSSLastKiB)))
		gr := fmt.Sprintf("%5d -> %-4d %+6.1f%%", m.GoroutineFirst, m.GoroutineLast,
			100*growth(float64(m.GoroutineFirst), float64(m.GoroutineLast)))
		if m.JudgedBy != "" {
			rss += " (sum)"
			gr += " (sum)"
		}
		fmt.Fprintf(w, "%-12s %8d %13s %s %s  %s\n", m.Process, m.PID, life, rss, gr, result(m.Failures))
	}
	for _, c := range r.Crashes {
		fmt.Fprintf(w, "crash: %s\n", c)
	}
	var loads []float64
	for _, l := range r.Load {
		if !l.At.Before(r.Start) {
			loads = append(loads, l.Load1)
		}
	}
	if len(loads) > 0 {
		fmt.Fprintf(w, "\nmachine load average (1 minute) over the measurement: %.1f to %.1f, median %.1f\n",
			slices.Min(loads), slices.Max(loads), median(loads))
	}
	verdict := "PASS"
	if !v.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\nsoak %s: %v measured after %v settling, a fault every %v, recovery windows %v, memory "+
		"warm-up %v and windows %v\n", verdict, r.Config.Duration, r.Config.Settle, r.Config.Every,
		r.Config.Recovery, r.Config.MemWarmup, r.Config.MemWindow)
}

func result(failures []string) string {
	if len(failures) == 0 {
		return "pass"
	}
	return "FAIL: " + strings.Join(failures, "; ")
}

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}
