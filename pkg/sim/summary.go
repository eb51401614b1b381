package sim

// What a simulation reports: its time series by the second, and the summary of a run.

import (
	"math"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// Second is one second of a simulation's time series. Requests are counted in the second they arrived.
type Second struct {
	// DemandQPS is the workload's rate; Arrivals the requests that arrived.
	DemandQPS float64 `json:"demand_qps"`
	Arrivals  int     `json:"arrivals"`
	Degraded  int     `json:"degraded,omitempty"` // replies degraded (deadline policy degrade; docs/degrade.md)
	// OK, Partial, Dropped and Late count the replies by status; Refused the requests admission control refused
	// (pkg/admission: answered overloaded at once, at no model time).
	OK      int `json:"ok"`
	Partial int `json:"partial"`
	Dropped int `json:"dropped"`
	Late    int `json:"late"`
	Refused int `json:"refused"`
	// AccuracySum sums the served accuracy of the ok, degraded and partial replies.
	AccuracySum float64 `json:"accuracy_sum"`
	// ActiveServers is the number of workers assigned a variant of the pipeline at the end of the second;
	// ActiveByClass the same per server class (on a cluster of classes), CostPerHour their hourly price.
	ActiveServers int            `json:"active_servers"`
	ActiveByClass map[string]int `json:"active_by_class,omitempty"`
	CostPerHour   float64        `json:"cost_per_hour"`
	// EstimateQPS is the planner's demand estimate at the end of the second.
	EstimateQPS float64 `json:"estimate_qps"`
	Mode        string  `json:"mode"`
	// Epoch is the plan's epoch at the end of the second: each new allocation raises it.
	Epoch uint64 `json:"epoch"`
}

// Result is what a simulation measured of one pipeline.
type Result struct {
	System   string   `json:"system"`
	Pipeline string   `json:"pipeline"`
	Seconds  []Second `json:"-"`
	Summary  Summary  `json:"summary"`
}

// Summary aggregates a simulation.
type Summary struct {
	System          string  `json:"system"`
	Pipeline        string  `json:"pipeline"`
	Requests        int     `json:"requests"`
	OK              int     `json:"ok"`
	Partial         int     `json:"partial"`
	Dropped         int     `json:"dropped"`
	Late            int     `json:"late"`
	Refused         int     `json:"refused"`
	Degraded        int     `json:"degraded"`         // replies degraded: violations, but answers
	UnansweredRatio float64 `json:"unanswered_ratio"` // the share answered neither ok nor degraded
	// SLOViolationRatio is the share of the requests not answered ok, refused ones included;
	// AcceptedViolationRatio the same among the requests admitted (loadgen's two figures).
	SLOViolationRatio      float64 `json:"slo_violation_ratio"`
	AcceptedViolationRatio float64 `json:"accepted_violation_ratio"`
	// MeanAccuracy is the mean served accuracy of the ok, degraded and partial replies (as loadgen reports it).
	// MaxAccuracyDrop is the largest drop of a window's mean served accuracy (DropWindow) below the run's best
	// window's: how far the run gave up accuracy at its worst (Loki's figure 8, "the maximum accuracy drop"; on a
	// workload that starts low, the best window serves the most accurate variants). WorstWindowAccuracy is that
	// worst window's.
	MeanAccuracy        float64 `json:"mean_accuracy"`
	MaxAccuracyDrop     float64 `json:"max_accuracy_drop"`
	WorstWindowAccuracy float64 `json:"worst_window_accuracy"`
	MeanActiveServers   float64 `json:"mean_active_servers"`
	MaxActiveServers    int     `json:"max_active_servers"`
	// MeanCostPerHour is the mean hourly price of the servers in use (active servers times their class's price,
	// over the seconds, like MeanActiveServers), MaxCostPerHour the most of any second; MeanActiveByClass the mean active servers per class, on a cluster
	// of classes. Cluster is the cluster simulated, when it has classes or prices.
	MeanCostPerHour   float64            `json:"mean_cost_per_hour"`
	MaxCostPerHour    float64            `json:"max_cost_per_hour"`
	MeanActiveByClass map[string]float64 `json:"mean_active_by_class,omitempty"`
	Cluster           plan.Cluster       `json:"cluster,omitempty"`
	// EscalationRatio is the share of the items the cascades' first variants executed that they sent on (the whole
	// run); PlannedAccuracy the system accuracy the last plan expected, Cascades its thresholds. Empty without them.
	EscalationRatio float64            `json:"escalation_ratio,omitempty"`
	PlannedAccuracy float64            `json:"planned_accuracy,omitempty"`
	Cascades        map[string]float64 `json:"cascades,omitempty"`
	// ItemHops counts items executed at a task; Replans the new allocations published.
	ItemHops int64 `json:"item_hops"`
	Replans  int   `json:"replans"`
	// With the plan check (control.Config.Check): CheckChanged counts the new allocations the check changed, and
	// CheckPredicted is the violation ratio it predicted for the last one.
	CheckChanged   int     `json:"check_changed,omitempty"`
	CheckPredicted float64 `json:"check_predicted,omitempty"`
	// PlanSeconds is the wall time the planning core took, for every pipeline (part of WallSeconds, which is the
	// whole run's).
	PlanSeconds float64 `json:"plan_s"`
	// PoliciesSolved is how many routing_mode ramsis policies were computed during the run (pkg/ramsis: those found
	// in the process's cache cost nothing), the plan check's simulations' included, and PolicySeconds the wall
	// time they took (part of PlanSeconds when the plan check computed them). Several runs at once in one process
	// count each other's.
	PoliciesSolved int     `json:"policies_solved,omitempty"`
	PolicySeconds  float64 `json:"policy_s,omitempty"`
	SimulatedS     float64 `json:"simulated_s"`
	WallSeconds    float64 `json:"wall_s"`
}

// DropWindow is the window Summary.MaxAccuracyDrop compares, and dropMinServed the fewest replies a window needs to
// count (a window of a few replies says little of the plan's accuracy).
const (
	DropWindow    = 10 * time.Second
	dropMinServed = 20
)

// windowAccuracy is the best and worst mean served accuracy of the seconds' windows (Summary.MaxAccuracyDrop), 0
// and 0 when no window served enough.
func windowAccuracy(seconds []Second) (best, worst float64) {
	n := int(DropWindow / time.Second)
	best, worst = math.Inf(-1), math.Inf(1)
	for i := 0; i+n <= len(seconds); i += n {
		t := tallySeconds(seconds[i : i+n])
		if t.ok+t.partial+t.degraded < dropMinServed {
			continue
		}
		a := t.accuracy()
		best, worst = max(best, a), min(worst, a)
	}
	if math.IsInf(best, 0) {
		return 0, 0
	}
	return best, worst
}
