// What the planner hears: the frontends' demand reports and the workers' heartbeats, and the workers it assigns
// from them.

package planner

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/tuner"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// DefaultDemandBacklog is the default of Config.DemandBacklog per pipeline: a second's reports of a thousand
// frontends, each reporting every pipeline once a second.
const DefaultDemandBacklog = 1024

// maxDemandReportBytes is what a demand report takes at most (a frontend id, a count and an interval: under 100
// bytes in msgpack), for the subscription's byte limit.
const maxDemandReportBytes = 1 << 10

// demandLimits bound the demand reports waiting for onDemand, which takes the planner's lock: reports pile up while
// a plan is being published.
func (p *Planner) demandLimits() bus.Limits {
	return bus.Limits{Msgs: p.cfg.DemandBacklog, Bytes: p.cfg.DemandBacklog * maxDemandReportBytes}
}

func (p *Planner) onDemand(m *nats.Msg) {
	name := strings.TrimPrefix(m.Subject, wire.DemandPrefix)
	var r wire.DemandReport
	if err := wire.UnmarshalMsgpack(m.Data, &r); err != nil {
		p.complaints.Warn(complainReport, "pipeline", name, "err", err)
		return
	}
	if !wire.ValidName(r.Frontend) {
		p.complaints.Warn(complainReport, "pipeline", name, "err", fmt.Sprintf("frontend id %q", r.Frontend))
		return
	}
	interval := time.Duration(r.IntervalMs * float64(time.Millisecond))
	if math.IsNaN(r.IntervalMs) || math.IsInf(r.IntervalMs, 0) {
		interval = 0
	}
	p.mu.Lock()
	e := p.demand[name]
	var err error
	stepped := false
	if e != nil {
		now := time.Now()
		if err = e.Observe(r.Frontend, r.Count, interval, now); err == nil {
			stepped = e.Stepped(now)
		}
	}
	p.mu.Unlock()
	if stepped {
		select {
		case p.stepped <- struct{}{}:
		default:
		}
	}
	if err != nil {
		p.complaints.Warn(complainReport, "pipeline", name, "frontend", r.Frontend, "err", err)
	}
}

// spec is the spec of a pipeline the planner serves; nil otherwise.
func (p *Planner) spec(name string) *pipeline.Spec {
	for _, s := range p.cfg.Pipelines {
		if s.Name == name {
			return s
		}
	}
	return nil
}

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
		p.mu.Lock()
		changed = p.live.Seen(id, e.Created())
		p.foldObservations(id, reg)
		p.latency.Set(id, time.Now(), reg.Observed)
		p.mu.Unlock()
	} else {
		p.mu.Lock()
		changed = p.live.Forget(id)
		p.counters.Forget(id)
		p.latency.Forget(id)
		p.mu.Unlock()
	}
	if changed {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// foldObservations adds what a worker measured since its previous heartbeat to the multiplicative-factor
// estimates, and the sub-requests its variants emitted to the demand of the tasks they went to. Called with mu held.
func (p *Planner) foldObservations(id string, reg wire.Registration) {
	for key, delta := range p.counters.Fold(id, reg) {
		name, hop, found := strings.Cut(key, ":")
		fe, spec := p.fanout[name], p.spec(name)
		if !found || fe == nil || spec == nil {
			continue
		}
		fe.Observe(hop, delta)
		task, _, _ := strings.Cut(hop, "/")
		if t := spec.Task(task); t != nil && delta.Items > 0 {
			for _, child := range t.Children {
				p.taskDemand[name].Add(child, delta.Children[child])
			}
		}
	}
}

// reassign recomputes the assignments for the live workers and writes the ones that changed.
func (p *Planner) reassign(ctx context.Context) error {
	live := p.liveWorkers(time.Now())
	p.mu.Lock()
	prev := p.assign
	p.mu.Unlock()

	plans := make([]*plan.Plan, len(p.loops))
	for i, l := range p.loops {
		plans[i] = tuner.WithLoans(l.Current(), p.lent[i])
	}
	next, unplaced := plan.Assign(plans, live, prev)
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
			p.log.Info("worker assigned", "worker", id, "pipeline", a.Pipeline, "variant", a.Hop(), "max_batch", a.MaxBatch)
		}
	}
	for id := range prev {
		if _, ok := next[id]; !ok {
			// Gone: remove its assignment so a returning worker starts idle until assigned again.
			if err := p.deleteKey(ctx, wire.AssignKey(id)); err != nil {
				return err
			}
			p.log.Info("worker gone", "worker", id, "was", prev[id].Hop())
		}
	}
	p.mu.Lock()
	p.assign = next
	p.mu.Unlock()
	if unplaced != p.unplaced && time.Now().After(p.quietUntil) {
		if unplaced > 0 {
			p.log.Warn("not enough workers for the plan", "replicas_unplaced", unplaced, "workers", len(live))
		} else {
			p.log.Info("every planned replica has a worker", "workers", len(live))
		}
		p.unplaced = unplaced
	}
	return nil
}
