package worker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// forward publishes the sub-requests of one message's items, grouped per destination variant, and reports its
// leaves (finished, dropped or failed items) to the request's frontend.
func (w *Worker) forward(ctx context.Context, s *serving, in *inbound) error {
	path := wire.AppendHop(in.path, s.a.Task, s.a.Variant)
	var routes map[string][]plan.Route
	if s.plan != nil {
		routes = s.plan.Routing.Downstream[s.hop]
	}
	var leaves []wire.ItemResult
	var acks []jetstream.PubAckFuture
	now := time.Now()
	atTask, left := now.Sub(in.enqueued), in.deadline.Sub(now)
	s.refreshStage()
	for i, it := range in.items {
		st := in.status[i]
		if st == "" {
			w.items.Add(1)
		}
		out := in.outputs[i]
		k := out.NumChildren()
		if st != "" || k == 0 {
			if st == "" {
				st = wire.ItemOK
			}
			switch st {
			case wire.ItemDropped:
				w.countDrop(s, in.reason[i])
			case wire.ItemError:
				w.failed.Add(1)
			}
			leaves = append(leaves, wire.ItemResult{ID: it.ID, Den: it.Den, Path: wire.SplitPath(path),
				Status: st, Reason: in.reason[i], Outputs: out.Tensors})
			continue
		}
		den := it.Den * uint64(k)
		if den/uint64(k) != it.Den {
			leaves = append(leaves, wire.ItemResult{ID: it.ID, Den: it.Den, Path: wire.SplitPath(path),
				Status: wire.ItemError, Reason: "fan-out too deep: item weight overflows"})
			w.failed.Add(1)
			continue
		}
		// Children are numbered across child tasks in a fixed order, so a re-execution names them the same.
		groups := map[string]*wire.TaskMessage{} // destination "task/variant" -> items
		var order []string
		n := 0
		for _, child := range s.task.Children {
			for _, inputs := range out.Children[child] {
				id := wire.ChildItemID(it.ID, n)
				n++
				d := s.stage.Route(child, routes[child], now, atTask, left, w.rng.Float64(), w.rng.Float64())
				v, reason := d.Variant, d.Reason
				if d.Rerouted {
					w.rerouted.Add(1)
					w.observe(s, func(o *Observed) { o.Rerouted++ })
				}
				if v == "" {
					leaves = append(leaves, wire.ItemResult{ID: id, Den: den, Path: wire.SplitPath(path),
						Status: wire.ItemDropped, Reason: reason})
					w.countDrop(s, reason)
					continue
				}
				dest := wire.Hop(child, v)
				g, ok := groups[dest]
				if !ok {
					g = &wire.TaskMessage{}
					groups[dest] = g
					order = append(order, dest)
				}
				g.Items = append(g.Items, wire.Item{ID: id, Den: den, Inputs: inputs})
			}
		}
		for _, dest := range order {
			task, variant, _ := strings.Cut(dest, "/")
			msg, err := w.taskMsg(in, s.a.Pipeline, task, variant, path, it.ID, groups[dest])
			if err != nil {
				return err
			}
			f, err := w.js.PublishMsgAsync(msg)
			if err != nil {
				return fmt.Errorf("publish to %s: %w", msg.Subject, err)
			}
			acks = append(acks, f)
		}
	}
	if len(leaves) > 0 {
		data, err := msgpack.Marshal(&wire.ResultMessage{RequestID: in.requestID, Items: leaves})
		if err != nil {
			return err
		}
		if err := w.nc.Publish(in.replyTo, data); err != nil {
			return fmt.Errorf("report to %s: %w", in.replyTo, err)
		}
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish to %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (w *Worker) taskMsg(in *inbound, pipelineName, task, variant, path, parent string, tm *wire.TaskMessage) (*nats.Msg, error) {
	data, err := msgpack.Marshal(tm)
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(wire.TaskSubject(pipelineName, task, variant))
	msg.Data = data
	msg.Header.Set(wire.HeaderRequestID, in.requestID)
	msg.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(in.deadline))
	msg.Header.Set(wire.HeaderPath, path)
	msg.Header.Set(wire.HeaderReplyTo, in.replyTo)
	msg.Header.Set(wire.HeaderMsgID, wire.TaskMsgID(in.requestID, parent, task, variant))
	otel.GetTextMapPropagator().Inject(in.ctx, bus.HeaderCarrier(msg.Header))
	return msg, nil
}
