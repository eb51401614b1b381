package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// UnknownPipeline is the pipeline label of requests for a pipeline no spec names: the subject is the client's to
// choose, so it must not become a label value.
const UnknownPipeline = "_unknown"

// FrontendCounts are a frontend's cumulative counters (frontend.Stats), exported as _total counters.
type FrontendCounts struct {
	Accepted, Refused, Overloaded, Late, StrayLeaves, BadReports, ReplyFailures uint64
	// Model executions of the items of answered requests, and those spent on requests answered dropped.
	ExecutedItems, DroppedWorkItems uint64
	// Messages the NATS client dropped over the subscriptions' pending limits: requests (unanswered), results, and
	// micro protocol requests.
	DroppedRequests, DroppedResults, DroppedControl uint64
	// Joined items (a join task's parts made one) the frontend could not enqueue.
	JoinFailures uint64
}

// Frontend holds the frontends' metrics: one per registry, shared by the frontends of a process.
type Frontend struct {
	requests  *prometheus.CounterVec
	admission *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	accuracy  *prometheus.SummaryVec

	mu      sync.Mutex
	sources []func() FrontendCounts
	descs   map[string]*prometheus.Desc
}

// NewFrontend registers the frontend metrics with reg; with none (nil), there are none (nil).
func NewFrontend(reg prometheus.Registerer) *Frontend {
	if reg == nil {
		return nil
	}
	m := &Frontend{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("frontend", "requests_total"),
			Help: "Requests answered, by pipeline and reply status (ok, degraded, partial, dropped, late, error, overloaded)."},
			[]string{LabelPipeline, LabelStatus}),
		admission: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("frontend", "admission_refusals_total"),
			Help: "Requests admission control refused at once (status overloaded), by pipeline, priority class and " +
				"reason (rate: beyond the frontend's share of what the plan serves; deadline: nearer than the " +
				"fastest path or the queue ahead)."}, []string{LabelPipeline, LabelClass, LabelReason}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name("frontend", "request_duration_seconds"),
			Help:    "End-to-end latency of answered requests, from arrival at the frontend to the reply, by pipeline and status.",
			Buckets: LatencyBuckets}, []string{LabelPipeline, LabelStatus}),
		accuracy: prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: name("frontend", "served_accuracy"),
			Help: "Served end-to-end accuracy of answered requests (sum/count: the mean)."}, []string{LabelPipeline}),
		descs: map[string]*prometheus.Desc{},
	}
	for _, c := range frontendCounters {
		m.descs[c.name] = prometheus.NewDesc(name("frontend", c.name), c.help, nil, nil)
	}
	reg.MustRegister(m.requests, m.admission, m.latency, m.accuracy, m)
	return m
}

var frontendCounters = []struct {
	name, help string
	get        func(FrontendCounts) uint64
}{
	{"accepted_total", "Requests sent into a pipeline.", func(c FrontendCounts) uint64 { return c.Accepted }},
	{"refused_total", "Requests answered with an error without entering a pipeline.", func(c FrontendCounts) uint64 { return c.Refused }},
	{"overloaded_total", "Refusals of requests the intake had no room or time for.", func(c FrontendCounts) uint64 { return c.Overloaded }},
	{"late_total", "Requests answered at their deadline with what had finished.", func(c FrontendCounts) uint64 { return c.Late }},
	{"stray_leaves_total", "Leaf reports for requests already answered.", func(c FrontendCounts) uint64 { return c.StrayLeaves }},
	{"bad_reports_total", "Undecodable or inconsistent result messages.", func(c FrontendCounts) uint64 { return c.BadReports }},
	{"reply_failures_total", "Replies that could not be encoded or sent.", func(c FrontendCounts) uint64 { return c.ReplyFailures }},
	{"executed_items_total", "Model executions of the items of answered requests (from their leaves).",
		func(c FrontendCounts) uint64 { return c.ExecutedItems }},
	{"dropped_work_items_total", "Of executed_items_total, those of requests answered dropped: model time spent on nothing.",
		func(c FrontendCounts) uint64 { return c.DroppedWorkItems }},
	{"dropped_requests_total", "Requests dropped unanswered over the request subscription's pending limits (a flood).",
		func(c FrontendCounts) uint64 { return c.DroppedRequests }},
	{"dropped_results_total", "Result messages dropped over the result subscription's pending limits.",
		func(c FrontendCounts) uint64 { return c.DroppedResults }},
	{"dropped_control_total", "Micro protocol requests ($SRV.*) dropped over their subscriptions' pending limits.",
		func(c FrontendCounts) uint64 { return c.DroppedControl }},
	{"join_failures_total", "Joined items (a join task's parts made one) the frontend could not enqueue.",
		func(c FrontendCounts) uint64 { return c.JoinFailures }},
}

// AddSource adds a frontend's counters to the exported sums.
func (m *Frontend) AddSource(f func() FrontendCounts) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.sources = append(m.sources, f)
	m.mu.Unlock()
}

// Replied records the reply to an accepted request: its pipeline, status, latency and served accuracy (refusals:
// Refused).
func (m *Frontend) Replied(pipeline, status string, seconds float64, accuracy float64) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(pipeline, status).Inc()
	m.latency.WithLabelValues(pipeline, status).Observe(seconds)
	m.accuracy.WithLabelValues(pipeline).Observe(accuracy)
}

// Refused records the reply to a request that never entered a pipeline: in requests_total (status error, or
// overloaded), not in the latency histogram, which is the pipelines' end-to-end latency.
func (m *Frontend) Refused(pipeline, status string) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(pipeline, status).Inc()
}

// AdmissionRefused records a request admission control refused (pkg/admission), by pipeline, class and reason. The
// pipeline is one a spec names (the gate sees no other).
func (m *Frontend) AdmissionRefused(pipeline string, class int, reason string) {
	if m == nil {
		return
	}
	m.admission.WithLabelValues(pipeline, strconv.Itoa(class), reason).Inc()
}

// Describe implements prometheus.Collector for the counters read from the sources.
func (m *Frontend) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Frontend) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	sources := append([]func() FrontendCounts(nil), m.sources...)
	m.mu.Unlock()
	counts := make([]FrontendCounts, len(sources))
	for i, f := range sources {
		counts[i] = f()
	}
	for _, c := range frontendCounters {
		var sum uint64
		for _, n := range counts {
			sum += c.get(n)
		}
		ch <- prometheus.MustNewConstMetric(m.descs[c.name], prometheus.CounterValue, float64(sum))
	}
}
