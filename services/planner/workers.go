// The workers: their heartbeats, which of them are live and which of those can serve, what the planner keeps of
// each (forgotten when one is gone), and their assignments.

package planner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func (p *Planner) onWorker(e jetstream.KeyValueEntry) {
	id, _ := wire.WorkerKeys.Name(e.Key())
	var changed bool
	if e.Operation() == jetstream.KeyValuePut {
		var reg wire.Registration
		err := json.Unmarshal(e.Value(), &reg)
		if err == nil {
			err = plan.ValidateRegistration(id, reg, e.Created())
		}
		if err != nil {
			p.complaints.Warn(complainRegistration, "key", e.Key(), "err", err)
			return
		}
		class := cmp.Or(reg.Class, wire.DefaultClass)
		p.mu.Lock()
		changed = p.live.Seen(id, e.Created())
		if p.class[id] != class { // a worker back as another class: its class's servers changed
			changed = changed || p.class[id] != ""
			p.class[id] = class
		}
		p.revision[id] = e.Revision()
		delete(p.expired, id) // written again: its newer registration stays
		if p.noteFailing(id, reg.Failing) {
			changed = true
		}
		p.mu.Unlock()
		p.core.Heartbeat(id, reg, time.Now())
		if p.workersReady.Load() { // before, the watch replays the registrations in the bucket: old, not late
			p.metrics.Heartbeat(time.Since(e.Created()))
		}
	} else {
		p.mu.Lock()
		changed = p.live.Forget(id)
		p.forget(id)
		delete(p.expired, id) // deleted already
		p.mu.Unlock()
	}
	if changed {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// noteFailing keeps what worker id's heartbeat says it cannot serve (nil: nothing), and reports whether that
// changed. Called with mu held.
func (p *Planner) noteFailing(id string, f *wire.AssignmentFailure) bool {
	was := p.failing[id]
	if f == nil {
		delete(p.failing, id)
		if was != "" {
			p.log.Info("worker serves its assignment again", "worker", id, "variant", was)
		}
		return was != ""
	}
	p.failing[id] = f.Variant
	if was != f.Variant {
		p.log.Warn("worker cannot serve its assignment; planning without it until it can", "worker", id,
			"variant", f.Variant, "attempts", f.Attempts, "since", f.Since, "err", f.Reason)
	}
	return was != f.Variant
}

// forget drops what the planner kept of a worker that is gone. Called with mu held.
func (p *Planner) forget(id string) {
	p.core.Forget(id)
	delete(p.failing, id)
	delete(p.class, id)
	delete(p.revision, id)
}

// liveWorkers are the workers whose registration is fresh, in name order (control.Liveness): while the planner's
// connection is down, and for a WorkerTimeout after it is back, no worker is expired for the heartbeats the bus
// could not carry. A worker found gone is forgotten, and its registration marked for deletion (deleteExpired).
func (p *Planner) liveWorkers(now time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.nc.Stats().Reconnects; r != p.reconnects || !p.nc.IsConnected() {
		p.reconnects = r
		p.live.Grace(now)
	}
	live := p.live.Live(now)
	for _, id := range p.live.Gone() {
		p.expired[id] = p.revision[id]
		p.forget(id)
	}
	return live
}

// workers are the live workers that can serve (able, in name order: the capacity the plans are made for and
// assigned to) and those that cannot: a worker whose heartbeat says it cannot serve the variant the planner
// assigned it. That one keeps its assignment and keeps trying (reassign); the plans do without it until it serves.
func (p *Planner) workers(now time.Time) (able, failing []string) {
	live := p.liveWorkers(now)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range live {
		if a, ok := p.assign[id]; ok && !a.Idle() && p.failing[id] == a.Served().String() {
			failing = append(failing, id)
		} else {
			able = append(able, id)
		}
	}
	p.failingShown = len(failing)
	return able, failing
}

// onCluster is the able workers per server class, priced by Config.Prices (core.Cluster.Tick plans on it), and
// each worker's class (for the assignment).
func (p *Planner) onCluster(able []string) (plan.Cluster, map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	counts := map[string]int{}
	classes := make(map[string]string, len(able))
	for _, id := range able {
		class := cmp.Or(p.class[id], wire.DefaultClass)
		counts[class]++
		classes[id] = class
	}
	if len(counts) == 0 {
		return plan.Uniform(0).WithPrices(p.cfg.Prices), classes
	}
	return plan.NewCluster(counts, p.cfg.Prices), classes
}

// deleteExpired deletes the registrations of the workers found gone, each only if the worker has not written it
// again since (a conditional delete: a worker back from a partition keeps its newer heartbeat). A delete that fails
// is tried again at the next call.
//
// Why the planner's liveness and not a per-key TTL in the bucket (LimitMarkerTTL): a lost bus is not a lost worker
// (control.Liveness), while the server would expire every registration during an outage or an election longer than
// the TTL, and the planner would then have to tell those expiries from deaths anyway; nats.go sets a key's TTL on
// Create only, not on the heartbeat's Put; and the bucket keeps its configuration. The cost: the registration of a
// worker that died while no planner ran stays until a planner starts (it is then gone after WorkerTimeout).
func (p *Planner) deleteExpired(ctx context.Context) {
	p.mu.Lock()
	todo := maps.Clone(p.expired)
	p.mu.Unlock()
	for id, rev := range todo {
		err := p.kv.Delete(ctx, wire.WorkerKey(id), jetstream.LastRevision(rev))
		if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			if ctx.Err() == nil {
				p.log.Warn("deleting a gone worker's registration failed; will retry", "worker", id, "err", err)
			}
			continue
		}
		p.mu.Lock()
		if r, ok := p.expired[id]; ok && r == rev {
			delete(p.expired, id)
		}
		p.mu.Unlock()
		if err == nil {
			p.log.Info("gone worker's registration deleted", "worker", id)
		}
	}
}

// reassign recomputes the assignments for the live workers and writes the ones that changed.
func (p *Planner) reassign(ctx context.Context) error {
	able, failing := p.workers(time.Now())
	p.mu.Lock()
	prev := p.assign
	p.mu.Unlock()

	_, classes := p.onCluster(able)
	next, unplaced := p.core.Assign(able, classes, prev)
	// A worker that cannot serve its assignment keeps it as it is, uncounted: it keeps trying, and serves the
	// variant once it can (then it counts again). Made idle, it would stop trying and count again at once, to be
	// assigned and fail again.
	for _, id := range failing {
		next[id] = prev[id]
	}
	for id, a := range next {
		if old, ok := prev[id]; ok && old == a {
			continue
		}
		data, _ := json.Marshal(a)
		if err := p.put(ctx, wire.AssignKey(id), data); err != nil {
			return err
		}
		if a.Idle() {
			p.log.Info("worker idle", "worker", id)
		} else {
			p.log.Info("worker assigned", "worker", id, "pipeline", a.Pipeline, "variant", a.Key(), "max_batch", a.MaxBatch)
		}
	}
	for id := range prev {
		if _, ok := next[id]; !ok {
			// Gone: remove its assignment so a returning worker starts idle until assigned again.
			if err := p.deleteKey(ctx, wire.AssignKey(id)); err != nil {
				return err
			}
			p.log.Info("worker gone", "worker", id, "was", prev[id].Key())
		}
	}
	p.mu.Lock()
	p.assign = next
	p.mu.Unlock()
	if unplaced != p.unplaced && time.Now().After(p.quietUntil) {
		if unplaced > 0 {
			p.log.Warn("not enough workers for the plan", "replicas_unplaced", unplaced, "workers", len(able))
		} else {
			p.log.Info("every planned replica has a worker", "workers", len(able))
		}
		p.unplaced = unplaced
	}
	return nil
}
