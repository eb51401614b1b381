// The tuner's looks at the queues between plans (pkg/core, pkg/tuner): the planner reads the queue depths from
// JetStream and moves and reassigns what the core decides.

package planner

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// tuneTimeout bounds one look's reading of the queues: a look that cannot see them in time is skipped.
const tuneTimeout = 200 * time.Millisecond

// tuneLook gives the core the queues of every pipeline, moves the queues it says to move, and reassigns the workers
// when the tuner's loans changed.
func (p *Planner) tuneLook(ctx context.Context, now time.Time) {
	able, _ := p.workers(now)
	queues := make(map[string]map[string]float64, len(p.cfg.Pipelines))
	counts := make(map[string]map[string]uint64, len(p.cfg.Pipelines)) // what the queues read, for the moves
	for _, cp := range p.core.Pipelines() {
		waiting, read, err := p.queueDepths(ctx, cp.Current())
		if err != nil {
			if ctx.Err() == nil {
				p.log.Debug("looking at the queues failed; skipping a look", "pipeline", cp.Spec.Name, "err", err)
			}
			continue // the other pipelines' queues may still be seen
		}
		queues[cp.Spec.Name], counts[cp.Spec.Name] = waiting, read
	}
	cluster, _ := p.onCluster(able)
	looked := p.core.Look(now, cluster, queues)
	for _, cp := range looked.Rehome {
		p.rehome(ctx, cp.Spec, cp.Current(), cp, counts[cp.Spec.Name])
	}
	if looked.Loans {
		p.log.Info("tuner loans", "lent", p.core.Loans())
		if err := p.reassign(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("assigning workers failed; will retry", "err", err)
		}
	}
}

// queueDepths are the messages waiting or in service at each variant pl hosts ("task/variant"), and the counts of
// every variant subject they were read from (taskQueues).
func (p *Planner) queueDepths(ctx context.Context, pl *plan.Plan) (map[string]float64, map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, tuneTimeout)
	defer cancel()
	counts, err := p.taskQueues(ctx, pl.Pipeline)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]float64, len(pl.Variants))
	for _, vp := range pl.Variants {
		out[wire.VariantKey{Task: vp.Task, Variant: vp.Variant}.String()] =
			float64(counts[wire.TaskSubject(pl.Pipeline, vp.Task, vp.Variant)])
	}
	return out, counts, nil
}

// taskQueues is how many messages each variant subject of a pipeline's task stream holds: waiting, or delivered and
// not yet acknowledged, since the stream keeps a message until its variant's consumer acknowledges it (work-queue
// retention): each consumer's NumPending plus NumAckPending. One request for the pipeline, where a look asked each
// hosted variant's consumer, and the once-a-second move every variant's (a soak's planner, idle: 70 requests a
// second, 17 of them for consumers that did not exist).
func (p *Planner) taskQueues(ctx context.Context, pipeline string) (map[string]uint64, error) {
	var st jetstream.Stream
	if v, ok := p.streams.Load(pipeline); ok {
		st = v.(jetstream.Stream)
	} else {
		var err error
		if st, err = p.js.Stream(ctx, wire.TaskStream(pipeline)); err != nil {
			return nil, err
		}
		p.streams.Store(pipeline, st)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(wire.TaskSubjects(pipeline)))
	if err != nil {
		return nil, err
	}
	return info.State.Subjects, nil
}
