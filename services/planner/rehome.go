// Moving what waits in the queue of a variant a new plan retired to the variant the plan routes its task to, and,
// in the seconds after a new plan, what waits beyond a hosted variant's next batches to the task's other variants.

package planner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/core"
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
// saw the new one follow within a second. Only the queues that hold messages are looked at: counts, the subjects'
// counts a look has just read, or nil to read them (taskQueues: one request for the pipeline); when they cannot be
// read, every variant's queue is, as its consumer says. With cp (a
// look of the tuner in the seconds after a new plan: core.Looked.Rehome), it also moves the oldest of the messages
// cp.Excess says, of the variants the plan cut, to the task's other variants (plan.Sibling), as the simulator does.
func (p *Planner) rehome(ctx context.Context, spec *pipeline.Spec, pl *plan.Plan, cp *core.Pipeline,
	counts map[string]uint64) {
	var err error
	if counts == nil {
		counts, err = p.taskQueues(ctx, spec.Name)
	}
	if err != nil && ctx.Err() == nil {
		p.log.Debug("reading the queues' counts failed; looking at every variant's", "pipeline", spec.Name, "err", err)
	}
	for _, t := range spec.Tasks {
		for _, v := range t.Variants {
			if err == nil && counts[wire.TaskSubject(spec.Name, t.Name, v.Name)] == 0 {
				continue // nothing waits there: no consumer to look up
			}
			key := wire.VariantKey{Task: t.Name, Variant: v.Name}.String()
			what, dest, count := "the queue of a retired variant", pl.Rehome, func(pending int) int { return pending }
			if pl.Hosts(t.Name, v.Name) {
				if cp == nil || !cp.Cut(t.Name, v.Name) || !pl.HostsOther(t.Name, v.Name) {
					continue // not cut by the plan, or the task's only variant: no lookup of its queue
				}
				what, dest = "what a hosted variant's replicas do not take soon", pl.Sibling
				count = func(pending int) int { return cp.Excess(t.Name, v.Name, pending) }
			}
			moved, err := p.rehomeQueue(ctx, spec.Name, t.Name, v.Name, count, dest)
			if err != nil && ctx.Err() == nil {
				p.log.Warn("moving "+what+" failed; will retry", "pipeline", spec.Name,
					"variant", key, "moved", moved, "err", err)
			} else if moved > 0 {
				p.log.Info("moved "+what, "pipeline", spec.Name, "variant", key,
					"moved", moved)
			}
		}
	}
}

// rehomeQueue moves up to count(pending) of the messages waiting in one variant's queue, the oldest first, each to
// dest(task, variant, its upstream hop, a uniform draw) (see rehome), and returns how many it moved. A message dest
// sends nowhere is negatively acknowledged, to wait for a later plan or a replica.
func (p *Planner) rehomeQueue(ctx context.Context, pipelineName, task, variant string, count func(pending int) int,
	dest func(task, variant, upstream string, u float64) string) (int, error) {
	cons, err := p.js.Consumer(ctx, wire.TaskStream(pipelineName), wire.Consumer(task, variant))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	moved := 0
	for left := uint64(max(0, count(int(min(cons.CachedInfo().NumPending, math.MaxInt32))))); left > 0; {
		batch, err := cons.FetchNoWait(int(min(left, rehomeBatch)))
		if err != nil {
			return moved, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			upstream := plan.Upstream(wire.SplitPath(m.Headers().Get(wire.HeaderPath)))
			to := dest(task, variant, upstream, rand.Float64())
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
