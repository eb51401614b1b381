// Lending idle workers to the variants whose queues outgrow their replicas, between plans (pkg/tuner).

package planner

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/tuner"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// rehomeAfterPlan is how long after a new plan the tuner's looks also move what waits at the variants it retired.
const rehomeAfterPlan = 2 * time.Second

// tuneTimeout bounds one look's consumer lookups: a look that cannot see the queues in time is skipped.
const tuneTimeout = 200 * time.Millisecond

// tuneLook takes the tuner's look at every pipeline's queues, and reassigns the workers when its loans changed.
func (p *Planner) tuneLook(ctx context.Context, now time.Time) {
	able, _ := p.workers(now)
	live := len(able)
	changed := false
	for i, spec := range p.specs {
		pl := p.loops[i].Current()
		waiting, err := p.queueDepths(ctx, pl)
		if err != nil {
			if ctx.Err() == nil {
				p.log.Debug("looking at the queues failed; skipping a look", "pipeline", spec.Name, "err", err)
			}
			continue // the other pipelines' queues may still be seen
		}
		p.waiting[i] = waiting
		// Upstream workers send to the variants a new plan retired until they have read it: for a while, what
		// reaches them is moved at every look rather than at the next second's.
		if now.Sub(p.replannedAt[i]) < rehomeAfterPlan {
			p.rehome(ctx, spec, pl)
		}
		lent := p.tuners[i].Look(now, p.tuneInput(i, pl, live))
		if maps.Equal(lent, p.lent[i]) {
			continue
		}
		p.log.Info("tuner loans", "pipeline", spec.Name, "lent", lent, "was", p.lent[i])
		p.lent[i], changed = lent, true
	}
	if changed {
		p.showLoans()
		if err := p.reassign(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("assigning workers failed; will retry", "err", err)
		}
	}
}

// tuneInput is what pipeline i's tuner sees under plan pl with live workers: the queues as of the last look, in
// items (the messages waiting times the items the workers found in each).
func (p *Planner) tuneInput(i int, pl *plan.Plan, live int) tuner.Input {
	spec := p.specs[i]
	p.mu.Lock()
	perMessage := p.counters.ItemsPerMessage()
	estimate := p.demand[spec.Name].Estimate()
	p.mu.Unlock()
	waiting := p.waiting[i]
	return tuner.Observe(spec, pl, func(hop string) float64 {
		items := perMessage[spec.Name+":"+hop]
		if items <= 0 {
			items = 1
		}
		return waiting[hop] * items
	}, p.serversFor(i, live), estimate, p.cfg.RouteUtilization)
}

// queueDepths are the messages waiting or in service at each variant pl hosts, from its consumer's state.
func (p *Planner) queueDepths(ctx context.Context, pl *plan.Plan) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, tuneTimeout)
	defer cancel()
	out := make(map[string]float64, len(pl.Variants))
	for _, vp := range pl.Variants {
		c, err := p.js.Consumer(ctx, wire.TaskStream(pl.Pipeline), wire.Consumer(vp.Task, vp.Variant))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue // not made yet: nothing waits
		} else if err != nil {
			return nil, err
		}
		info := c.CachedInfo()
		out[wire.Hop(vp.Task, vp.Variant)] = float64(info.NumPending) + float64(info.NumAckPending)
	}
	return out, nil
}

// retune has pipeline i's tuner look at its new plan at once (with the queues of the last look), so that the
// workers it lent stay where the plan still wants them rather than going back and being lent again.
func (p *Planner) retune(i int, now time.Time) {
	if p.tuners[i] == nil {
		return
	}
	able, _ := p.workers(now)
	p.lent[i] = p.tuners[i].Look(now, p.tuneInput(i, p.loops[i].Current(), len(able)))
	p.showLoans()
}

// showLoans publishes the loans to the metrics.
func (p *Planner) showLoans() {
	shown := make(map[string]map[string]int, len(p.specs))
	for i, spec := range p.specs {
		shown[spec.Name] = p.lent[i]
	}
	p.mu.Lock()
	p.lentShown = shown
	p.mu.Unlock()
}
