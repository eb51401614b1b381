package worker

import (
	"context"
	"sync"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// queuePoll is how often a worker routing by queue (the spec's routing_mode queue or ramsis) reads the state of the queues
// it sends to, and queueStale how old a reading may be before the tables decide again.
// A reading waits up to queueReadWait for the consumers' states, not a poll: on a busy server the API's answer can
// take longer than 50 ms, and readings that all time out leave the tables to decide once the last is a second old.
const (
	queuePoll     = 50 * time.Millisecond
	queueStale    = time.Second
	queueReadWait = queueStale / 2
)

// queueWatch is the queues' state a worker's queue-aware routing reads (routing.Queues): for each hosted variant
// of the child tasks of the variant it serves, the messages its consumer holds (waiting, or delivered and not
// acknowledged) times the mean items per message this worker sent there (the queue counts messages; a message
// carries the sub-requests of one parent for one variant).
type queueWatch struct {
	mu       sync.Mutex
	pipeline string
	watched  []wire.VariantKey
	depth    map[wire.VariantKey]float64 // messages held
	at       time.Time                   // of the last reading
	reading  uint64                      // counts the readings (routing.Queues.Reading)
	sent     map[wire.VariantKey][2]float64
	changed  chan struct{} // told of a watch, so that a worker with nothing to read waits without a poll
}

func newQueueWatch() *queueWatch {
	return &queueWatch{depth: map[wire.VariantKey]float64{}, sent: map[wire.VariantKey][2]float64{},
		changed: make(chan struct{}, 1)}
}

// watch sets the queues to read: the hosted variants of task's child tasks under plan p (none: stop reading).
func (q *queueWatch) watch(spec *pipeline.Spec, p *plan.Plan, task *pipeline.Task) {
	var keys []wire.VariantKey
	if p != nil && routing.ReadsQueues(spec.RoutingMode) {
		for _, child := range task.Children {
			for _, vp := range p.Variants {
				if vp.Task == child {
					keys = append(keys, wire.VariantKey{Task: child, Variant: vp.Variant})
				}
			}
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pipeline != spec.Name {
		clear(q.sent)
	}
	q.pipeline, q.watched = spec.Name, keys
	clear(q.depth)
	q.at = time.Time{}
	q.reading++
	select {
	case q.changed <- struct{}{}:
	default:
	}
}

// Reading names the last reading: the hop step counts what this worker sent since on top of it.
func (q *queueWatch) Reading() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.reading
}

// note counts a message of items sub-requests published to task/variant.
func (q *queueWatch) note(task, variant string, items int) {
	if q == nil {
		return
	}
	k := wire.VariantKey{Task: task, Variant: variant}
	q.mu.Lock()
	s := q.sent[k]
	q.sent[k] = [2]float64{s[0] + float64(items), s[1] + 1}
	q.mu.Unlock()
}

// Depth is the items at task/variant as last read; false when not read, or not within queueStale.
func (q *queueWatch) Depth(task, variant string) (float64, bool) {
	k := wire.VariantKey{Task: task, Variant: variant}
	q.mu.Lock()
	defer q.mu.Unlock()
	n, ok := q.depth[k]
	if !ok || time.Since(q.at) > queueStale {
		return 0, false
	}
	perMessage := 1.0
	if s := q.sent[k]; s[1] > 0 {
		perMessage = s[0] / s[1]
	}
	return n * perMessage, true
}

// watchQueues reads the watched queues every queuePoll until ctx ends: each consumer's state (a JetStream API
// request per variant; a worker may look up any consumer). With none to read (the routing modes that do not read
// queues, or no assignment) it waits to be told of a watch: a 50 ms poll of nothing was most of what a worker at
// rest cost (docs/measurements.md "A worker at rest").
func (w *Worker) watchQueues(ctx context.Context) {
	q := w.queues
	t := time.NewTicker(queuePoll)
	defer t.Stop()
	polling := true
	for {
		q.mu.Lock()
		pl, keys := q.pipeline, q.watched
		q.mu.Unlock()
		if len(keys) == 0 {
			if polling {
				t.Stop()
				polling = false
			}
			select {
			case <-ctx.Done():
				return
			case <-q.changed:
			}
			continue
		}
		if !polling {
			t.Reset(queuePoll)
			polling = true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-q.changed:
			continue // read the new set at the next tick
		}
		read := make(map[wire.VariantKey]float64, len(keys))
		// One wait for the whole reading, not one a variant: slow answers for several variants would otherwise
		// add up past queueStale.
		rctx, cancel := context.WithTimeout(ctx, queueReadWait)
		for _, k := range keys {
			c, err := w.js.Consumer(rctx, wire.TaskStream(pl), wire.Consumer(k.Task, k.Variant))
			if err != nil {
				break // not read: the tables decide until a reading succeeds
			}
			info := c.CachedInfo()
			read[k] = float64(info.NumPending) + float64(info.NumAckPending)
		}
		cancel()
		q.mu.Lock()
		if q.pipeline == pl && len(read) == len(keys) {
			q.depth, q.at = read, time.Now()
			q.reading++
		}
		q.mu.Unlock()
	}
}
