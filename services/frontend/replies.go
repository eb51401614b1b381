// From the workers' results to the one reply each request gets, and the demand reports to the planner.

package frontend

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/codes"

	"github.com/sleipnir-serving/sleipnir/pkg/completion"
	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/telemetry"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// reportDemand tells the planner, every DemandEvery, how many requests each pipeline received (zero included, so
// the estimate falls when traffic stops).
func (f *Frontend) reportDemand(ctx context.Context) {
	t := time.NewTicker(f.cfg.DemandEvery)
	defer t.Stop()
	last := time.Now()
	reconnects := f.nc.Stats().Reconnects
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f.mu.Lock()
			counts := f.demand
			f.demand = make(map[string]int, len(counts))
			f.mu.Unlock()
			gaps := f.takeGaps()
			f.admMu.Lock()
			for name, n := range f.refusedDemand {
				counts[name] += n
			}
			clear(f.refusedDemand)
			f.admMu.Unlock()
			interval := now.Sub(last)
			last = now
			// What a frontend counts while its clients cannot reach it (the connection lost, or the server
			// restarting) is not the demand: a report of it, flushed on reconnect, made the planner shrink the plan
			// for a second after every server restart. Withheld, the planner holds its estimate meanwhile.
			if r := f.nc.Stats().Reconnects; r != reconnects || !f.nc.IsConnected() {
				reconnects = r
				f.demandWithheld.Add(1)
				continue
			}
			for _, name := range f.Pipelines() {
				data, _ := msgpack.Marshal(&wire.DemandReport{Frontend: f.cfg.ID, Count: counts[name],
					IntervalMs: float64(interval) / float64(time.Millisecond), GapsMs: gaps[name]})
				if err := f.nc.Publish(wire.DemandSubject(name), data); err != nil {
					f.log.Debug("demand report failed", "err", err)
				}
			}
		}
	}
}

// onResult records leaf reports and replies to requests they complete. A worker sends them as requests and holds
// its task message until the frontend confirms (services/worker report): every message is confirmed once read,
// whatever it held, even for a request this frontend no longer knows (answered, or accepted before a restart), or
// the worker would report it again until its grace ran out.
func (f *Frontend) onResult(m *nats.Msg) {
	defer confirm(m)
	var rm wire.ResultMessage
	if err := wire.UnmarshalMsgpack(m.Data, &rm); err != nil {
		f.badReports.Add(1)
		f.complaints.Warn("discarding undecodable result message", "err", err)
		return
	}
	f.mu.Lock()
	r, ok := f.pending[rm.RequestID]
	if !ok {
		f.afterLate(&rm)
		f.mu.Unlock()
		f.stray.Add(uint64(len(rm.Items)))
		return
	}
	// A task message of the request was set aside (pkg/wire.ResultMessage.Error): what its items would have become
	// is unknown, so the request fails now rather than at its deadline.
	done := rm.Error != ""
	spec, p := f.lookup(r.pipeline)
	var sends []joined
	for _, it := range rm.Items {
		record := []wire.ItemResult{it}
		if spec != nil && p != nil {
			record, sends = f.join(r, spec, p, it, record[:0], sends)
		}
		for _, x := range record {
			d, _, err := r.tracker.Add(x)
			if err != nil {
				f.badReports.Add(1)
				f.complaints.Warn("inconsistent leaf report", "request", rm.RequestID, "err", err)
			}
			done = done || d
		}
	}
	if done {
		f.retireLocked(r)
	}
	f.mu.Unlock()
	f.publishJoined(sends)
	if done {
		f.finish(r, false, rm.Error)
	}
}

// expire answers a request at its deadline with what has finished.
func (f *Frontend) expire(id string) {
	f.mu.Lock()
	r, ok := f.pending[id]
	delete(f.pending, id)
	late := true
	if ok {
		// A join still waiting closes with what arrived: a request that waited for nothing else is partial.
		f.closeJoins(r)
		late = !r.tracker.Done()
		if late {
			f.watchLate(r)
		}
	}
	f.mu.Unlock()
	if ok {
		if late {
			f.late.Add(1)
		}
		f.finish(r, late, "")
	}
}

// failAll answers every pending request with an error (at shutdown).
func (f *Frontend) failAll(why string) {
	f.mu.Lock()
	all := f.pending
	f.pending = map[string]*request{}
	for _, r := range all {
		f.dropJoins(r)
	}
	f.mu.Unlock()
	for _, r := range all {
		r.timer.Stop()
		f.finish(r, false, why)
	}
}

// finish sends the one reply of a request that has left the pending map.
func (f *Frontend) finish(r *request, late bool, failure string) {
	f.mu.Lock()
	f.sentToRoot(r.pipeline, r.rootVariant, -1)
	f.mu.Unlock()
	rep := &wire.InferReply{ID: r.clientID, RequestID: r.id, Pipeline: r.pipeline,
		Status: r.tracker.Status(late), Results: r.tracker.Results(),
		LatencyMs: float64(time.Since(r.start).Microseconds()) / 1000}
	if failure != "" {
		rep.Status, rep.Error = wire.StatusError, failure
	}
	if rep.Results == nil {
		rep.Results = []wire.ItemResult{}
	}
	if spec, p := f.lookup(r.pipeline); spec != nil {
		rep.Accuracy = servedAccuracy(spec, p, rep.Results)
	}
	rep.TraceID = telemetry.TraceID(r.span)
	r.span.SetAttributes(telemetry.AttrStatus.String(rep.Status), telemetry.AttrAccuracy.Float64(rep.Accuracy),
		telemetry.AttrDeadlineSlackMs.Float64(float64(time.Until(r.deadline).Microseconds())/1000))
	for _, it := range rep.Results {
		if it.Status == wire.ItemDropped {
			r.span.SetAttributes(telemetry.AttrDropReason.String(it.Reason))
			break
		}
	}
	if rep.Status != wire.StatusOK {
		r.span.SetStatus(codes.Error, rep.Status)
	}
	r.span.End()
	f.measureReply(r, rep.Status, rep.Accuracy)
	f.replied.Add(1)
	n := uint64(executedItems(rep.Results))
	f.executedItems.Add(n)
	switch rep.Status {
	case wire.StatusDropped:
		f.droppedWork.Add(n)
	case wire.StatusDegraded:
		f.degraded.Add(1)
	}
	f.gateDone(r.pipeline, r.gated, r.start, rep.Status)
	r.reply(rep)
}

// executedItems is how many of a request's items a model executed, read from its leaves: a leaf that finished or
// failed was executed, one dropped or degraded was not, and every item above a leaf (its id's prefixes: item "0.3" is a child of
// "0") was executed to emit it. Leaves not reported (a late reply) are not counted.
func executedItems(results []wire.ItemResult) int {
	seen := map[string]bool{}
	for _, it := range results {
		id := it.ID
		if it.Status == wire.ItemDropped || it.Status == wire.ItemDegraded {
			id = parentItem(id)
		}
		for ; id != "" && !seen[id]; id = parentItem(id) {
			seen[id] = true
		}
	}
	return len(seen)
}

// parentItem is the id of the item that emitted id (wire.ChildItemID); "" for the root.
func parentItem(id string) string {
	if i := strings.LastIndexByte(id, '.'); i >= 0 {
		return id[:i]
	}
	return ""
}

// servedAccuracy is the weighted mean of the path accuracies of the finished leaves under the plan in force p (its
// cascades' thresholds, or the gear's a leaf ran at: plan.GearedLeafAccuracy), degraded answers counted at what they answered
// (pipeline.Spec.AnsweredAccuracyOf), each leaf weighted by its share of the request and its branch's weight
// (pipeline.Spec.LeafWeight).
func servedAccuracy(spec *pipeline.Spec, p *plan.Plan, results []wire.ItemResult) float64 {
	var acc completion.Accuracy
	for _, it := range results {
		switch {
		case it.Den == 0:
		case it.Status == wire.ItemOK:
			acc.Add(spec.LeafWeight(it.Path)/float64(it.Den), p.GearedLeafAccuracy(spec, it.Path, it.Gear))
		case it.Status == wire.ItemDegraded:
			acc.Add(spec.LeafWeight(it.Path)/float64(it.Den), spec.AnsweredAccuracyOf(it.Path))
		}
	}
	return acc.Value()
}

// noteGap records the arrival of a request of pipeline now, accepted or refused as demand, for the gaps its demand
// report carries.
func (f *Frontend) noteGap(pipeline string) {
	f.gapsMu.Lock()
	defer f.gapsMu.Unlock()
	g := f.gaps[pipeline]
	if g == nil {
		g = &demand.Gaps{}
		f.gaps[pipeline] = g
	}
	g.Note(time.Now())
}

// takeGaps returns each pipeline's gaps since the last report.
func (f *Frontend) takeGaps() map[string][]float32 {
	f.gapsMu.Lock()
	defer f.gapsMu.Unlock()
	out := make(map[string][]float32, len(f.gaps))
	for name, g := range f.gaps {
		out[name] = g.Take()
	}
	return out
}
