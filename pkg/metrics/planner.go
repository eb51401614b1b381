package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// QueueDepth is what waits at one variant's consumer.
type QueueDepth struct {
	Pipeline, Task, Variant string
	// Pending messages not yet delivered, and delivered but not acknowledged (in a worker's batch).
	Pending, Unacked uint64
}

// PlannerState is what the planner knows now, read at scrape time.
type PlannerState struct {
	// Demand is the demand estimate per pipeline, requests per second.
	Demand map[string]float64
	// SLO is each pipeline's latency objective, seconds.
	SLO map[string]float64
	// Queues are the variants' queues as JetStream reports them.
	Queues []QueueDepth
	// Lent is, per pipeline, the workers the tuner lends each variant ("task/variant") on top of the plan's.
	Lent map[string]map[string]int
	// FailingWorkers are the live workers whose heartbeat says they cannot serve their assignment: the plans do
	// without them.
	FailingWorkers int
	// DroppedReports counts the demand reports dropped over the subscription's pending limits.
	DroppedReports uint64
}

// Planner holds the planner's metrics: the plan in force per pipeline, and the demand estimate and the variants'
// queues (read at scrape time through the function given to NewPlanner).
type Planner struct {
	epoch, accuracy, active, cluster, estimate, served, solve, gap, optimal, plannedDemand *prometheus.GaugeVec
	checkPredicted, checkCandidates                                                        *prometheus.GaugeVec
	mode, replicas, maxBatch, fanout                                                       *prometheus.GaugeVec
	cost, classServers, floorShortfall                                                     *prometheus.GaugeVec
	plans                                                                                  *prometheus.CounterVec
	heartbeatDelay                                                                         prometheus.Histogram
	solves                                                                                 *prometheus.HistogramVec
	divisions                                                                              prometheus.Histogram

	state                             func() PlannerState
	demandD, sloD, pendingD, unackedD *prometheus.Desc
	lentD, failingD, droppedD         *prometheus.Desc
	mu                                sync.Mutex
	lastEpoch                         map[string]uint64
}

// Modes a plan may be in (plan.Mode*): each pipeline has a series per mode, 1 for the plan's.
var Modes = []string{plan.ModeStatic, plan.ModeHardware, plan.ModeAccuracy, plan.ModeOverloaded}

// NewPlanner registers the planner metrics with reg; state (nil: none) reads the demand estimates and queues.
func NewPlanner(reg prometheus.Registerer, state func() PlannerState) *Planner {
	pipe := []string{LabelPipeline}
	variant := []string{LabelPipeline, LabelTask, LabelVariant}
	gauge := func(n, help string, labels []string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name("plan", n), Help: help}, labels)
	}
	m := &Planner{
		epoch:         gauge("epoch", "Epoch of the plan in force.", pipe),
		mode:          gauge("mode", "1 for the mode of the plan in force (static, hardware, accuracy, overloaded), 0 for the others.", []string{LabelPipeline, LabelMode}),
		accuracy:      gauge("accuracy", "End-to-end accuracy the plan in force expects.", pipe),
		active:        gauge("active_servers", "Workers the plan in force uses.", pipe),
		cluster:       gauge("cluster_servers", "Workers the planner could use for the pipeline.", pipe),
		plannedDemand: gauge("demand_qps", "Demand the plan in force was sized for (the estimate plus headroom), requests per second.", pipe),
		estimate:      gauge("estimate_qps", "Demand estimate the plan in force was made from, requests per second.", pipe),
		served:        gauge("served_qps", "Requests per second the plan in force serves (less than its demand when overloaded).", pipe),
		solve:         gauge("solve_duration_seconds", "Time the allocation solve of the plan in force took.", pipe),
		gap:           gauge("gap", "Relative optimality gap of the plan in force (0: proven optimal).", pipe),
		optimal:       gauge("optimal", "1 when the solver proved the plan in force optimal.", pipe),
		replicas:      gauge("replicas", "Replicas the plan in force gives a variant.", variant),
		cost: gauge("cost_per_hour", "Hourly price of the servers the plan in force uses (the planner's --price "+
			"per server class; 0 when none is priced).", pipe),
		floorShortfall: gauge("floor_shortfall", "Share of the demand the plan in force cannot serve at the "+
			"pipeline's accuracy floor (min_accuracy), which the frontends refuse (reason accuracy); 0 when it holds "+
			"or there is none.", pipe),
		classServers: gauge("class_servers", "Workers of a server class the plan in force uses.",
			[]string{LabelPipeline, LabelServerClass}),
		checkPredicted: gauge("check_predicted_violation_ratio", "Share of requests the plan check predicted the "+
			"plan in force misses (with --check).", pipe),
		checkCandidates: gauge("check_candidates", "Plans the plan check simulated to choose the plan in force "+
			"(with --check; 1: the allocator's first).", pipe),
		maxBatch: gauge("max_batch", "Largest batch the plan in force runs a variant at.", variant),
		fanout: gauge("multiplicative_factor", "Measured multiplicative factor (sub-requests per item) the plan in force used for a variant.",
			variant),
		plans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("planner", "plans_total"),
			Help: "Plans (new allocations) published."}, pipe),
		heartbeatDelay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("planner", "heartbeat_delay_seconds"),
			Help: "Time from a worker's heartbeat reaching the KV bucket (the NATS server's clock) to the planner " +
				"having handled it: a planner falling behind the heartbeats shows as a growing delay.",
			Buckets: HeartbeatBuckets}),
		solves: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name("planner", "solve_seconds"),
			Help: "Allocation solves of the control loops, by what became of their plan (new_plan, same: the " +
				"allocation in force again, not_taken: not worth its swaps): a solve that publishes nothing still " +
				"takes its CPU.", Buckets: SolveBuckets}, []string{LabelPipeline, LabelOutcome}),
		divisions: prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("planner", "division_solve_seconds"),
			Help: "Joint solves that divided the workers between the pipelines (sharing joint), each division's " +
				"solves together.", Buckets: SolveBuckets}),
		state: state,
		sloD:  prometheus.NewDesc(name("pipeline", "slo_seconds"), "The pipeline's end-to-end latency objective.", pipe, nil),
		demandD: prometheus.NewDesc(name("planner", "demand_estimate_qps"),
			"The planner's current demand estimate, requests per second.", pipe, nil),
		pendingD: prometheus.NewDesc(name("queue", "pending_messages"),
			"Task messages waiting at a variant's consumer, not yet delivered.", variant, nil),
		unackedD: prometheus.NewDesc(name("queue", "unacked_messages"),
			"Task messages delivered to a variant's workers and not yet acknowledged.", variant, nil),
		lentD: prometheus.NewDesc(name("tuner", "lent_workers"),
			"Idle workers the tuner lends a variant on top of the plan's replicas (pkg/tuner).", variant, nil),
		failingD: prometheus.NewDesc(name("planner", "failing_workers"),
			"Live workers whose heartbeat says they cannot serve their assignment (a variant that failed to load): the plans do without them.",
			nil, nil),
		droppedD: prometheus.NewDesc(name("planner", "dropped_reports_total"),
			"Demand reports dropped over the subscription's pending limits (the planner fell behind).", nil, nil),
		lastEpoch: map[string]uint64{},
	}
	reg.MustRegister(m.epoch, m.mode, m.accuracy, m.active, m.cluster, m.plannedDemand, m.estimate, m.served, m.solve,
		m.gap, m.optimal, m.replicas, m.maxBatch, m.fanout, m.plans, m.heartbeatDelay, m.solves, m.divisions, m.checkPredicted, m.checkCandidates, m.cost, m.classServers, m.floorShortfall, m)
	return m
}

// millisToSeconds spans a millisecond to 5 s (seconds).
var millisToSeconds = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// HeartbeatBuckets (seconds) of the heartbeat delay: a millisecond to a few heartbeat periods (workers beat every
// second, and are taken for gone after 5 s without one).
var HeartbeatBuckets = millisToSeconds

// SolveBuckets (seconds) of the solves' durations: a small pipeline's solve takes milliseconds, and the live limit
// (--solve-time-limit) is 1 s by default.
var SolveBuckets = millisToSeconds

// Solve records one allocation solve of pipeline's control loop, which took ms, and what became of its plan.
func (m *Planner) Solve(pipeline, outcome string, ms float64) {
	if m == nil {
		return
	}
	m.solves.WithLabelValues(pipeline, outcome).Observe(ms / 1000)
}

// DivisionSolve records the joint solves, ms in all, of one division of the workers between the pipelines.
func (m *Planner) DivisionSolve(ms float64) {
	if m == nil {
		return
	}
	m.divisions.Observe(ms / 1000)
}

// Heartbeat records that the planner handled a worker's heartbeat delay after it reached the bucket.
func (m *Planner) Heartbeat(delay time.Duration) {
	if m == nil {
		return
	}
	m.heartbeatDelay.Observe(delay.Seconds())
}

// Plan records a published plan (new allocation or new routing) of its pipeline.
func (m *Planner) Plan(pl *plan.Plan) {
	if m == nil || pl == nil {
		return
	}
	p := pl.Pipeline
	m.mu.Lock()
	if last, ok := m.lastEpoch[p]; !ok || last != pl.Epoch {
		m.plans.WithLabelValues(p).Inc()
	}
	m.lastEpoch[p] = pl.Epoch
	m.mu.Unlock()
	m.epoch.WithLabelValues(p).Set(float64(pl.Epoch))
	for _, mode := range Modes {
		v := 0.0
		if mode == pl.Mode {
			v = 1
		}
		m.mode.WithLabelValues(p, mode).Set(v)
	}
	if a := pl.Allocation; a != nil {
		m.accuracy.WithLabelValues(p).Set(a.SystemAccuracy)
		m.active.WithLabelValues(p).Set(float64(a.ActiveServers))
		m.cluster.WithLabelValues(p).Set(float64(a.ClusterServers))
		m.plannedDemand.WithLabelValues(p).Set(a.DemandQPS)
		m.estimate.WithLabelValues(p).Set(a.Estimate())
		m.served.WithLabelValues(p).Set(a.ServedQPS)
		m.solve.WithLabelValues(p).Set(a.SolveMs / 1000)
		m.gap.WithLabelValues(p).Set(a.Gap)
		opt := 0.0
		if a.Optimal {
			opt = 1
		}
		m.optimal.WithLabelValues(p).Set(opt)
		m.cost.WithLabelValues(p).Set(a.CostPerHour)
		m.floorShortfall.WithLabelValues(p).Set(1 - pl.FloorShare())
		if c := a.Check; c != nil {
			m.checkPredicted.WithLabelValues(p).Set(c.ViolationRatio)
			m.checkCandidates.WithLabelValues(p).Set(float64(c.Candidates))
		}
	} else {
		active := 0
		for _, v := range pl.Variants {
			active += v.Replicas
		}
		m.active.WithLabelValues(p).Set(float64(active))
	}
	// A retired variant's series go; the plan's are set anew.
	only := prometheus.Labels{LabelPipeline: p}
	m.replicas.DeletePartialMatch(only)
	m.maxBatch.DeletePartialMatch(only)
	m.fanout.DeletePartialMatch(only)
	m.classServers.DeletePartialMatch(only)
	for class, n := range pl.ServersByClass() {
		m.classServers.WithLabelValues(p, class).Set(float64(n))
	}
	for _, v := range pl.Variants {
		m.replicas.WithLabelValues(p, v.Task, v.Variant).Set(float64(v.Replicas))
		m.maxBatch.WithLabelValues(p, v.Task, v.Variant).Set(float64(v.MaxBatch))
	}
	for key, f := range pl.Fanout {
		if k, err := wire.ParseVariantKey(key); err == nil {
			m.fanout.WithLabelValues(p, k.Task, k.Variant).Set(f.Mean)
		}
	}
}

// Describe implements prometheus.Collector for what is read at scrape time.
func (m *Planner) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.demandD
	ch <- m.sloD
	ch <- m.pendingD
	ch <- m.unackedD
	ch <- m.lentD
	ch <- m.failingD
	ch <- m.droppedD
}

// Collect implements prometheus.Collector: the demand estimates and the queues now.
func (m *Planner) Collect(ch chan<- prometheus.Metric) {
	if m.state == nil {
		return
	}
	st := m.state()
	ch <- prometheus.MustNewConstMetric(m.droppedD, prometheus.CounterValue, float64(st.DroppedReports))
	for p, qps := range st.Demand {
		ch <- prometheus.MustNewConstMetric(m.demandD, prometheus.GaugeValue, qps, p)
	}
	for p, slo := range st.SLO {
		ch <- prometheus.MustNewConstMetric(m.sloD, prometheus.GaugeValue, slo, p)
	}
	ch <- prometheus.MustNewConstMetric(m.failingD, prometheus.GaugeValue, float64(st.FailingWorkers))
	for p, lent := range st.Lent {
		for key, n := range lent {
			k, err := wire.ParseVariantKey(key)
			if err != nil {
				continue
			}
			ch <- prometheus.MustNewConstMetric(m.lentD, prometheus.GaugeValue, float64(n), p, k.Task, k.Variant)
		}
	}
	for _, q := range st.Queues {
		ch <- prometheus.MustNewConstMetric(m.pendingD, prometheus.GaugeValue, float64(q.Pending), q.Pipeline, q.Task, q.Variant)
		ch <- prometheus.MustNewConstMetric(m.unackedD, prometheus.GaugeValue, float64(q.Unacked), q.Pipeline, q.Task, q.Variant)
	}
}
