// What became of the requests answered late: did their work finish after all (docs/faults.md, "Results at least
// once")?

package frontend

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// lateWatch is how long after a late reply the frontend keeps counting its request's leaves: longer than a worker
// reports past a deadline (services/worker resultGrace, 5 s) plus its redelivery delays. A variable for tests.
var lateWatch = 10 * time.Second

// maxWatched bounds the requests watched at once (a tracker each).
const maxWatched = 10000

// confirm tells the worker that sent a result message that it was read (services/worker report).
func confirm(m *nats.Msg) {
	if m.Reply != "" {
		_ = m.Respond(nil)
	}
}

// watchLate keeps counting the leaves of r, answered late, for lateWatch: a copy of its tracker, as the reply being
// sent reads r's. Only a request whose task message JetStream had acknowledged is watched: one whose publish was
// lost (the server died with it) was never executed, and says nothing about results. Under f.mu.
func (f *Frontend) watchLate(r *request) {
	if !r.enqueued.Load() || len(f.watched) >= maxWatched {
		return
	}
	f.watched[r.id] = r.tracker.Clone()
	time.AfterFunc(lateWatch, func() {
		f.mu.Lock()
		_, unfinished := f.watched[r.id]
		delete(f.watched, r.id)
		f.mu.Unlock()
		if unfinished {
			f.lateUnfinished.Add(1)
		}
	})
}

// afterLate records the leaves of a request no longer pending, if it is watched. Under f.mu.
func (f *Frontend) afterLate(rm *wire.ResultMessage) {
	t, ok := f.watched[rm.RequestID]
	if !ok {
		return
	}
	for _, it := range rm.Items {
		if done, _, err := t.Add(it); err == nil && done {
			delete(f.watched, rm.RequestID)
			f.lateCompleted.Add(1)
			return
		}
	}
}
