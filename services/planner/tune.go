// The tuner's looks at the queues between plans (pkg/core, pkg/tuner): the planner reads the queue depths from
// JetStream and moves and reassigns what the core decides.

package planner

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// tuneTimeout bounds one look's consumer lookups: a look that cannot see the queues in time is skipped.
const tuneTimeout = 200 * time.Millisecond

// tuneLook gives the core the queues of every pipeline, moves the queues it says to move, and reassigns the workers
// when the tuner's loans changed.
func (p *Planner) tuneLook(ctx context.Context, now time.Time) {
	able, _ := p.workers(now)
	queues := make(map[string]map[string]float64, len(p.cfg.Pipelines))
	for _, cp := range p.core.Pipelines() {
		waiting, err := p.queueDepths(ctx, cp.Current())
		if err != nil {
			if ctx.Err() == nil {
				p.log.Debug("looking at the queues failed; skipping a look", "pipeline", cp.Spec.Name, "err", err)
			}
			continue // the other pipelines' queues may still be seen
		}
		queues[cp.Spec.Name] = waiting
	}
	cluster, _ := p.onCluster(able)
	looked := p.core.Look(now, cluster, queues)
	for _, cp := range looked.Rehome {
		p.rehome(ctx, cp.Spec, cp.Current(), cp)
	}
	if looked.Loans {
		p.log.Info("tuner loans", "lent", p.core.Loans())
		if err := p.reassign(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("assigning workers failed; will retry", "err", err)
		}
	}
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
		key := wire.VariantKey{Task: vp.Task, Variant: vp.Variant}.String()
		out[key] = float64(info.NumPending) + float64(info.NumAckPending)
	}
	return out, nil
}
