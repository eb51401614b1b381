package worker

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// countDrop counts one item dropped at variant s for reason.
func (w *Worker) countDrop(s *serving, reason string) {
	w.dropped.Add(1)
	if c := w.drops[reason]; c != nil {
		c.Add(1)
	}
	w.observe(s, func(o *Observed) { o.Dropped[reason]++ })
}

// countDegraded counts an item answered degraded at this variant, late for reason (policy degrade).
func (w *Worker) countDegraded(s *serving, reason string) {
	w.degraded.Add(1)
	w.observe(s, func(o *Observed) {
		if o.Degraded == nil {
			o.Degraded = map[string]uint64{}
		}
		o.Degraded[reason]++
	})
}

// observe updates the measurements of the variant s serves.
func (w *Worker) observe(s *serving, f func(*Observed)) {
	key := s.served
	w.obsMu.Lock()
	defer w.obsMu.Unlock()
	o := w.observed[key]
	if o == nil {
		o = &Observed{FanoutCounts: wire.FanoutCounts{Children: map[string]uint64{}}, Dropped: map[string]uint64{}}
		w.observed[key] = o
	}
	f(o)
}

// measure records a model batch of n items that s's variant ran from began to end.
func (w *Worker) measure(s *serving, n int, began, end time.Time) {
	key := s.served
	w.obsMu.Lock()
	defer w.obsMu.Unlock()
	w.latency.Add(key, s.variant, n, end.Sub(began), end)
}

// Observations returns a copy of the worker's cumulative measurements, with the batch latencies of the recent
// window.
func (w *Worker) Observations() map[string]Observed {
	w.obsMu.Lock()
	defer w.obsMu.Unlock()
	out := make(map[string]Observed, len(w.observed))
	now := time.Now()
	for k, o := range w.observed {
		c := *o
		c.Children = maps.Clone(o.Children)
		c.SubRequests = slices.Clone(o.SubRequests)
		c.Dropped = maps.Clone(o.Dropped)
		c.Degraded = maps.Clone(o.Degraded)
		c.Latency = w.latency.Summary(k, now)
		out[k] = c
	}
	return out
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	st := Stats{Messages: w.messages.Load(), Items: w.items.Load(), Batches: w.batches.Load(),
		Dropped: w.dropped.Load(), Failed: w.failed.Load(), Discarded: w.discarded.Load(),
		Rerouted: w.rerouted.Load(), Returned: w.returned.Load(), Unconfirmed: w.unconfirmed.Load(),
		Abandoned: w.abandoned.Load(), DropReasons: map[string]uint64{},
		Degraded: w.degraded.Load()}
	for r, c := range w.drops {
		if n := c.Load(); n > 0 {
			st.DropReasons[r] = n
		}
	}
	for r, c := range w.setAsideCounts {
		if n := c.Load(); n > 0 {
			if st.SetAside == nil {
				st.SetAside = map[string]uint64{}
			}
			st.SetAside[r] = n
		}
	}
	return st
}

// registration is what the worker's heartbeat and status say now (without its start and heartbeat count).
func (w *Worker) registration() Registration {
	return Registration{ID: w.cfg.ID, Class: w.cfg.Class, Updated: time.Now(), Variant: w.Serving(), Stats: w.Stats(),
		SwapMs: float64frombits(w.swapMs.Load()), Observed: w.Observations(), Failing: w.Failing()}
}

// register refreshes the worker's registration every RegisterEvery, at once when the worker fails to start its
// assignment, and at once when the connection comes back after a loss: the planner, which saw no heartbeat while the bus was away, knows the worker is alive without
// waiting a period.
func (w *Worker) register(ctx context.Context) {
	started := time.Now()
	var beat int64
	t := time.NewTicker(w.cfg.RegisterEvery)
	defer t.Stop()
	// Told of a reconnection rather than polling for one: a worker at rest wakes for little but its heartbeat (a 50 ms
	// poll alone costs a Go process about 3 ms of CPU a second on a VM, docs/measurements.md "A worker at rest").
	connected := w.nc.StatusChanged(nats.CONNECTED)
	defer w.nc.RemoveStatusListener(connected)
	for {
		beat++
		reg := w.registration()
		reg.Started, reg.Heartbeat = started, beat
		data, _ := json.Marshal(reg)
		if _, err := w.kv.Put(ctx, wire.WorkerKey(w.cfg.ID), data); err != nil && ctx.Err() == nil {
			w.log.Warn("registration refresh failed", "err", err)
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				break wait
			case <-w.beat:
				break wait
			case <-connected:
				break wait
			}
		}
	}
}

func float64bits(f float64) uint64     { return math.Float64bits(f) }
func float64frombits(b uint64) float64 { return math.Float64frombits(b) }
