package sim

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/plot"
)

// Interval aggregates consecutive seconds of a result. Requests count in the interval they arrived in; ratios
// and means with nothing to average are NaN (empty in CSV, gaps in plots).
type Interval struct {
	StartS            float64
	DemandQPS         float64 // the workload's mean rate
	Arrivals          int
	OK, Partial       int
	Dropped, Late     int
	Refused           int
	SLOViolationRatio float64
	Accuracy          float64 // mean served accuracy of the ok and partial replies
	ActiveServers     float64 // mean
	CostPerHour       float64 // mean
	EstimateQPS       float64 // the planner's estimate at the interval's end
	Mode              string  // the plan's mode at the interval's end
	Epoch             uint64  // the plan's epoch at the interval's end: each new allocation raises it
}

// Intervals aggregates the time series into intervals of width seconds (at least 1).
func (r *Result) Intervals(width int) []Interval {
	width = max(1, width)
	var out []Interval
	for lo := 0; lo < len(r.Seconds); lo += width {
		t := tallySeconds(r.Seconds[lo:min(lo+width, len(r.Seconds))])
		out = append(out, Interval{StartS: float64(lo), DemandQPS: t.demand / float64(t.n), Arrivals: t.arrivals,
			OK: t.ok, Partial: t.partial, Dropped: t.dropped, Late: t.late, Refused: t.refused, SLOViolationRatio: t.violationRatio(),
			Accuracy: t.accuracy(), ActiveServers: t.servers / float64(t.n), CostPerHour: t.cost / float64(t.n), EstimateQPS: t.last.EstimateQPS,
			Mode: t.last.Mode, Epoch: t.last.Epoch})
	}
	return out
}

// tally sums consecutive seconds: what an interval and the run's summary report.
type tally struct {
	n                                    int // seconds
	demand                               float64
	arrivals, ok, partial, dropped, late int
	refused, degraded                    int
	accuracySum, servers                 float64
	maxServers                           int
	maxCost                              float64
	cost                                 float64        // summed hourly price of the servers in use
	byClass                              map[string]int // summed servers in use per class
	last                                 Second
}

func tallySeconds(xs []Second) tally {
	t := tally{n: len(xs)}
	for _, x := range xs {
		t.demand += x.DemandQPS
		t.arrivals += x.Arrivals
		t.ok += x.OK
		t.partial += x.Partial
		t.dropped += x.Dropped
		t.late += x.Late
		t.refused += x.Refused
		t.degraded += x.Degraded
		t.accuracySum += x.AccuracySum
		t.servers += float64(x.ActiveServers)
		t.maxServers = max(t.maxServers, x.ActiveServers)
		t.cost += x.CostPerHour
		t.maxCost = max(t.maxCost, x.CostPerHour)
		for c, n := range x.ActiveByClass {
			if t.byClass == nil {
				t.byClass = map[string]int{}
			}
			t.byClass[c] += n
		}
		t.last = x
	}
	return t
}

// unansweredRatio is the share of requests answered neither ok nor degraded; NaN without requests.
func (t tally) unansweredRatio() float64 {
	if t.arrivals == 0 {
		return math.NaN()
	}
	return float64(t.arrivals-t.ok-t.degraded) / float64(t.arrivals)
}

// violationRatio is the share of requests not answered ok; NaN without requests.
func (t tally) violationRatio() float64 {
	if t.arrivals == 0 {
		return math.NaN()
	}
	return float64(t.arrivals-t.ok) / float64(t.arrivals)
}

// acceptedViolationRatio is the share of the requests admitted not answered ok; NaN without any.
func (t tally) acceptedViolationRatio() float64 {
	admitted := t.arrivals - t.refused
	if admitted == 0 {
		return math.NaN()
	}
	return float64(admitted-t.ok) / float64(admitted)
}

// accuracy is the mean served accuracy of the ok, degraded and partial replies; NaN without any.
func (t tally) accuracy() float64 {
	if served := t.ok + t.partial + t.degraded; served > 0 {
		return t.accuracySum / float64(served)
	}
	return math.NaN()
}

// IntervalFor is the report interval of a run of duration d: about 300 points, at least a second.
func IntervalFor(d time.Duration) int { return max(1, int(math.Round(d.Seconds()/300))) }

// WriteCSV writes the intervals as CSV with a header.
func WriteCSV(w io.Writer, ivs []Interval) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"t_s", "demand_qps", "arrivals", "ok", "partial", "dropped", "late", "slo_violation_ratio",
		"accuracy", "active_servers", "estimate_qps", "mode", "epoch", "refused",
		"cost_per_hour"})
	f := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	for _, iv := range ivs {
		cw.Write([]string{f(iv.StartS), f(round(iv.DemandQPS, 3)), strconv.Itoa(iv.Arrivals), strconv.Itoa(iv.OK),
			strconv.Itoa(iv.Partial), strconv.Itoa(iv.Dropped), strconv.Itoa(iv.Late),
			f(round(iv.SLOViolationRatio, 5)), f(round(iv.Accuracy, 5)), f(round(iv.ActiveServers, 3)),
			f(round(iv.EstimateQPS, 3)), iv.Mode, strconv.FormatUint(iv.Epoch, 10), strconv.Itoa(iv.Refused),
			f(round(iv.CostPerHour, 4))})
	}
	cw.Flush()
	return cw.Error()
}

func round(v float64, digits int) float64 {
	if math.IsNaN(v) {
		return v
	}
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// Violation floor and ceiling of the figure's log axis, in percent: a second with no violation is drawn at the floor.
const (
	violationFloorPct = 0.01
	violationCeilPct  = 100
	// More systems than this get a violations panel each: four spiky lines on one panel hide each other.
	sharedViolationPanel = 3
	ownViolationHeight   = 110
)

// Figure is the report figure of results over the same workload: demand, system accuracy, active servers and
// SLO-violation ratio, one panel each, one line per system in the same style in every panel (as Loki's figures 5 and
// 6). Violations are on a log scale: 0.2% and 2.5% differ as much as 2.5% and 25%. Dotted vertical lines mark the
// first Loki system's switches between hardware and accuracy scaling, as in the paper. With more than three systems,
// each has its own violations panel.
func Figure(title string, results []*Result, width int) *plot.Figure {
	f := &plot.Figure{Title: title, XLabel: "time (s)", Panels: []plot.Panel{
		{Title: "Demand: the workload and each system's estimate", YLabel: "QPS"},
		{Title: "System accuracy", YLabel: "accuracy"},
		{Title: "Active servers", YLabel: "servers"},
		{Title: "SLO violations (log scale)", YLabel: "% of requests", LogY: true,
			YMin: violationFloorPct, YMax: violationCeilPct},
	}}
	marked := false
	for i, r := range results {
		ivs := r.Intervals(width)
		x := make([]float64, len(ivs))
		var demand, est, acc, act, viol []float64
		for k, iv := range ivs {
			x[k] = iv.StartS
			demand = append(demand, iv.DemandQPS)
			est = append(est, iv.EstimateQPS)
			acc = append(acc, iv.Accuracy)
			act = append(act, iv.ActiveServers)
			viol = append(viol, 100*iv.SLOViolationRatio)
		}
		if i == 0 {
			f.Panels[0].Series = append(f.Panels[0].Series, plot.Series{Name: "workload", X: x, Y: demand})
		}
		if !marked && strings.HasPrefix(r.System, "loki") {
			f.Marks, marked = modeSwitches(r.System, ivs), true
		}
		f.Panels[0].Series = append(f.Panels[0].Series, plot.Series{Name: r.System + " estimate", Key: r.System, X: x, Y: est})
		f.Panels[1].Series = append(f.Panels[1].Series, plot.Series{Name: r.System, X: x, Y: acc})
		f.Panels[2].Series = append(f.Panels[2].Series, plot.Series{Name: r.System, X: x, Y: act})
		vs := plot.Series{Name: r.System, X: x, Y: viol}
		if len(results) <= sharedViolationPanel {
			f.Panels[3].Series = append(f.Panels[3].Series, vs)
			continue
		}
		p := f.Panels[3]
		p.Title, p.Height, p.Series = p.Title+": "+r.System, ownViolationHeight, []plot.Series{vs}
		f.Panels = append(f.Panels, p)
	}
	if len(results) > sharedViolationPanel {
		f.Panels = append(f.Panels[:3], f.Panels[4:]...)
	}
	return f
}

// modeSwitches marks the intervals where the plan switched between hardware and accuracy scaling.
func modeSwitches(system string, ivs []Interval) []plot.Mark {
	var marks []plot.Mark
	for k := 1; k < len(ivs); k++ {
		from, to := ivs[k-1].Mode, ivs[k].Mode
		if from != to && (to == plan.ModeAccuracy || to == plan.ModeHardware) &&
			(from == plan.ModeAccuracy || from == plan.ModeHardware) {
			marks = append(marks, plot.Mark{X: ivs[k].StartS, Label: strings.SplitN(system, ":", 2)[0] + ": " + to})
		}
	}
	return marks
}

// fileName turns a system name into a file name ("loki:per-task" -> "loki_per-task").
func fileName(system string) string { return strings.ReplaceAll(system, ":", "_") }

// WriteReport writes, into dir, each result's time series (SYSTEM.csv), the figure (figure.svg, figure.png) and
// the summaries (summary.json).
func WriteReport(dir, title string, results []*Result, width int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, r := range results {
		if err := writeFile(filepath.Join(dir, fileName(r.System)+".csv"), func(w io.Writer) error {
			return WriteCSV(w, r.Intervals(width))
		}); err != nil {
			return err
		}
	}
	fig := Figure(title, results, width)
	if err := writeFile(filepath.Join(dir, "figure.svg"), fig.WriteSVG); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "figure.png"), fig.WritePNG); err != nil {
		return err
	}
	sums := make([]Summary, len(results))
	for i, r := range results {
		sums[i] = r.Summary
	}
	return writeFile(filepath.Join(dir, "summary.json"), func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(sums)
	})
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// PrintSummaries prints one row per result; on a cluster of classes or prices, with the mean cost per hour and the
// mean servers in use per class.
func PrintSummaries(w io.Writer, results []*Result) {
	classed := slices.ContainsFunc(results, func(r *Result) bool { return r.Summary.Cluster != nil })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "system\trequests\tSLO violations\tmean accuracy\tmean servers\tmax servers\tdropped\tlate\trefused\tdegraded\treplans\titem hops\twall\t"
	if classed {
		head += "cost/h\tservers by class\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range results {
		s := r.Summary
		fmt.Fprintf(tw, "%s\t%d\t%.2f%%\t%.4f\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1fs\t", s.System, s.Requests,
			100*s.SLOViolationRatio, s.MeanAccuracy, s.MeanActiveServers, s.MaxActiveServers, s.Dropped, s.Late,
			s.Refused, s.Degraded, s.Replans, s.ItemHops, s.WallSeconds)
		if classed {
			var by []string
			for _, sc := range s.Cluster {
				by = append(by, fmt.Sprintf("%s=%.1f", sc.Name, s.MeanActiveByClass[sc.Name]))
			}
			fmt.Fprintf(tw, "%.2f\t%s\t", s.MeanCostPerHour, strings.Join(by, " "))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
