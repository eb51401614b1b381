// Moving what waits in the queue of a variant a new plan retired to the variant the plan routes its task to.

package planner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// rehomeBatch is how many messages rehome fetches from a variant's queue at a time.
const rehomeBatch = 256

// rehome moves the messages queued at the variants of spec that pl, the plan in force, hosts no replica of (a new
// plan retired them while the messages waited; no replica is left to fetch them, and they would wait out their
// deadlines) to the variants pl routes their task to from their upstream hop (plan.Rehome, which the simulator
// calls too): each is published again with its headers, under a message id of its own (wire.RehomedMsgID), then
// acknowledged. It runs every second, so messages that upstream workers sent on the old routing just before they
// saw the new one follow within a second. A variant never hosted has no consumer and costs one lookup.
func (p *Planner) rehome(ctx context.Context, spec *pipeline.Spec, pl *plan.Plan) {
	for _, t := range spec.Tasks {
		for _, v := range t.Variants {
			if pl.Hosts(t.Name, v.Name) {
				continue
			}
			moved, err := p.rehomeQueue(ctx, spec.Name, t.Name, v.Name, pl)
			if err != nil && ctx.Err() == nil {
				p.log.Warn("moving the queue of a retired variant failed; will retry", "pipeline", spec.Name,
					"variant", wire.VariantKey{Task: t.Name, Variant: v.Name}.String(), "moved", moved, "err", err)
			} else if moved > 0 {
				p.log.Info("moved the queue of a retired variant", "pipeline", spec.Name,
					"variant", wire.VariantKey{Task: t.Name, Variant: v.Name}.String(), "moved", moved)
			}
		}
	}
}

// rehomeQueue moves what waits in one retired variant's queue (see rehome) and returns how many messages it moved.
// A message pl routes nowhere is negatively acknowledged, to wait for a later plan.
func (p *Planner) rehomeQueue(ctx context.Context, pipelineName, task, variant string, pl *plan.Plan) (int, error) {
	cons, err := p.js.Consumer(ctx, wire.TaskStream(pipelineName), wire.Consumer(task, variant))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	moved := 0
	for left := cons.CachedInfo().NumPending; left > 0; {
		batch, err := cons.FetchNoWait(int(min(left, rehomeBatch)))
		if err != nil {
			return moved, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			upstream := plan.Upstream(wire.SplitPath(m.Headers().Get(wire.HeaderPath)))
			to := pl.Rehome(task, variant, upstream, rand.Float64())
			if to == "" {
				_ = m.Nak()
				continue
			}
			out := nats.NewMsg(wire.TaskSubject(pipelineName, task, to))
			for k, v := range m.Headers() {
				out.Header[k] = v
			}
			if id := m.Headers().Get(wire.HeaderMsgID); id != "" {
				out.Header.Set(wire.HeaderMsgID, wire.RehomedMsgID(id, to))
			}
			out.Data = m.Data()
			if _, err := p.js.PublishMsg(ctx, out); err != nil {
				_ = m.Nak()
				return moved, fmt.Errorf("publish to %s: %w", out.Subject, err)
			}
			// Acknowledged with the server's confirmation: once rehome returns, the message is gone from the queue.
			if err := m.DoubleAck(ctx); err != nil {
				return moved, err // redelivered after the ack wait; the next rehome's publish is de-duplicated
			}
			moved++
		}
		if err := batch.Error(); err != nil {
			return moved, err
		}
		if got == 0 {
			break
		}
		left -= uint64(got)
	}
	return moved, nil
}
