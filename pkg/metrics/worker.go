package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// WorkerSource is what a worker already counts (its heartbeat): the collector reads it at scrape time.
type WorkerSource interface {
	Stats() wire.WorkerStats
	Observations() map[string]wire.Observed // by "pipeline:task/variant"
	Serving() string                        // "pipeline:task/variant", or "" when idle
	Failing() *wire.AssignmentFailure       // not nil when it cannot serve its assignment
}

// Worker holds the workers' metrics: one per registry, shared by the workers of a process (`up` runs many), whose
// counters it sums per variant.
type Worker struct {
	batchSize, batchDuration, queueWait *prometheus.HistogramVec
	panics                              *prometheus.CounterVec

	mu      sync.Mutex
	sources []WorkerSource

	items, batches, dropped, rerouted, subrequests, serving *prometheus.Desc
	failed, discarded, returned, workers                    *prometheus.Desc
	setAside                                                *prometheus.Desc
}

// NewWorker registers the worker metrics with reg; with none (nil), there are none (nil).
func NewWorker(reg prometheus.Registerer) *Worker {
	if reg == nil {
		return nil
	}
	variant := []string{LabelPipeline, LabelTask, LabelVariant}
	desc := func(n, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(name("worker", n), help, append(append([]string(nil), variant...), extra...), nil)
	}
	m := &Worker{
		batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name("worker", "batch_size"),
			Help: "Items per executed model batch.", Buckets: BatchSizeBuckets}, variant),
		batchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name("worker", "batch_duration_seconds"),
			Help: "Time to execute one model batch.", Buckets: LatencyBuckets}, variant),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name("worker", "queue_wait_seconds"),
			Help: "Time an executed item waited in its variant's queue.", Buckets: LatencyBuckets}, variant),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("worker", "panics_total"),
			Help: "Model batches whose execution panicked (recovered: the batch's items failed)."}, variant),
		items:       desc("items_total", "Items executed."),
		batches:     desc("batches_total", "Model batches executed."),
		dropped:     desc("dropped_items_total", "Items dropped, by reason.", LabelReason),
		rerouted:    desc("rerouted_total", "Sub-requests sent to a backup variant instead of the routing table's choice."),
		subrequests: desc("subrequests_total", "Sub-requests emitted per child task (over items_total: the measured multiplicative factor).", LabelChild),
		serving:     desc("serving", "Workers serving the variant now."),
		failed:      prometheus.NewDesc(name("worker", "failed_items_total"), "Items whose execution failed.", nil, nil),
		discarded:   prometheus.NewDesc(name("worker", "discarded_messages_total"), "Messages that were not valid task messages.", nil, nil),
		returned:    prometheus.NewDesc(name("worker", "returned_messages_total"), "Messages that did not fit a batch: handed back to the queue, or carried to the replica's next batch.", nil, nil),
		setAside: prometheus.NewDesc(name("worker", "deadlettered_total"),
			"Task messages set aside in the dead-letter stream, by reason (redelivered, undecodable).", []string{LabelReason}, nil),
		workers: prometheus.NewDesc(name("worker", "workers"), "Workers in this process, by whether they serve a variant: serving, idle, or failing (they cannot serve their assignment: a variant that failed to load; they keep trying).", []string{"state"}, nil),
	}
	reg.MustRegister(m.batchSize, m.batchDuration, m.queueWait, m.panics, m)
	return m
}

// AddSource adds a worker to the exported sums.
func (m *Worker) AddSource(s WorkerSource) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.sources = append(m.sources, s)
	m.mu.Unlock()
}

// WorkerVariant is the worker metrics of one variant, its series looked up once (Worker.Variant): a worker records
// per batch and per item, and a label lookup per record was a measurable share of a hop (BenchmarkHop).
type WorkerVariant struct {
	batchSize, batchDuration, queueWait prometheus.Observer
	panics                              prometheus.Counter
}

// Variant is the metrics of one variant; none (nil) when m is nil.
func (m *Worker) Variant(pipeline, task, variant string) *WorkerVariant {
	if m == nil {
		return nil
	}
	return &WorkerVariant{batchSize: m.batchSize.WithLabelValues(pipeline, task, variant),
		batchDuration: m.batchDuration.WithLabelValues(pipeline, task, variant),
		queueWait:     m.queueWait.WithLabelValues(pipeline, task, variant),
		panics:        m.panics.WithLabelValues(pipeline, task, variant)}
}

// Batch records one executed model batch.
func (v *WorkerVariant) Batch(items int, took time.Duration) {
	if v == nil {
		return
	}
	v.batchSize.Observe(float64(items))
	v.batchDuration.Observe(took.Seconds())
}

// QueueWait records how long an executed item waited in the variant's queue.
func (v *WorkerVariant) QueueWait(waited time.Duration) {
	if v == nil {
		return
	}
	v.queueWait.Observe(waited.Seconds())
}

// Panicked records a model batch whose execution panicked.
func (v *WorkerVariant) Panicked() {
	if v == nil {
		return
	}
	v.panics.Inc()
}

// Describe implements prometheus.Collector for what is read from the sources.
func (m *Worker) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.items, m.batches, m.dropped, m.rerouted, m.subrequests, m.serving,
		m.failed, m.discarded, m.returned, m.workers, m.setAside} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the sources' counters summed per variant.
func (m *Worker) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	sources := append([]WorkerSource(nil), m.sources...)
	m.mu.Unlock()
	obs := map[wire.ServedKey]*wire.Observed{}
	serving := map[wire.ServedKey]int{}
	var failed, discarded, returned uint64
	setAside := map[string]uint64{}
	idle, failing := 0, 0
	for _, s := range sources {
		st := s.Stats()
		for r, n := range st.SetAside {
			setAside[r] += n
		}
		failed += st.Failed
		discarded += st.Discarded
		returned += st.Returned
		if k, err := wire.ParseServedKey(s.Serving()); err == nil {
			serving[k]++
		} else if s.Failing() != nil {
			failing++
		} else {
			idle++
		}
		for key, o := range s.Observations() {
			k, err := wire.ParseServedKey(key)
			if err != nil {
				continue
			}
			sum := obs[k]
			if sum == nil {
				sum = &wire.Observed{FanoutCounts: wire.FanoutCounts{Children: map[string]uint64{}}, Dropped: map[string]uint64{}}
				obs[k] = sum
			}
			sum.Items += o.Items
			sum.Batches += o.Batches
			sum.Rerouted += o.Rerouted
			for c, n := range o.Children {
				sum.Children[c] += n
			}
			for r, n := range o.Dropped {
				sum.Dropped[r] += n
			}
		}
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for k, o := range obs {
		counter(m.items, o.Items, k.Pipeline, k.Task, k.Variant)
		counter(m.batches, o.Batches, k.Pipeline, k.Task, k.Variant)
		counter(m.rerouted, o.Rerouted, k.Pipeline, k.Task, k.Variant)
		for _, r := range wire.DropReasons {
			counter(m.dropped, o.Dropped[r], k.Pipeline, k.Task, k.Variant, r)
		}
		for c, n := range o.Children {
			counter(m.subrequests, n, k.Pipeline, k.Task, k.Variant, c)
		}
		if _, ok := serving[k]; !ok {
			serving[k] = 0
		}
	}
	for k, n := range serving {
		ch <- prometheus.MustNewConstMetric(m.serving, prometheus.GaugeValue, float64(n), k.Pipeline, k.Task, k.Variant)
	}
	counter(m.failed, failed)
	counter(m.discarded, discarded)
	counter(m.returned, returned)
	for _, r := range wire.SetAsideReasons {
		counter(m.setAside, setAside[r], r)
	}
	ch <- prometheus.MustNewConstMetric(m.workers, prometheus.GaugeValue, float64(len(sources)-idle-failing), "serving")
	ch <- prometheus.MustNewConstMetric(m.workers, prometheus.GaugeValue, float64(idle), "idle")
	ch <- prometheus.MustNewConstMetric(m.workers, prometheus.GaugeValue, float64(failing), "failing")
}
