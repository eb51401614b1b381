package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/hop"
	"github.com/sleipnir-serving/sleipnir/pkg/telemetry"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// forward publishes the sub-requests of one message's items as the hop step (pkg/hop) routes, groups and splits
// them, and reports its leaves (finished, dropped or failed items) to the request's frontend. It returns at once;
// the message's outbox says when the publishes are acknowledged and the report confirmed, or why not (outbox.wait),
// so that a batch's messages wait for theirs together: one round trip a batch, and one confirmation timeout, not one
// a message, while the server is away.
func (w *Worker) forward(ctx context.Context, s *serving, in *inbound) {
	ob := &in.out
	ob.acks, ob.sends = ob.ack1[:0], ob.send1[:0]
	ob.err = w.publishOut(ctx, s, in, ob)
}

// outbox is what forwarding one message waits for: its publishes' acknowledgements, each with its "send" span
// (ended when the outbox is settled), and the frontend's confirmation of its leaves (nil: it has none).
type outbox struct {
	acks      []jetstream.PubAckFuture
	sends     []trace.Span
	confirmed <-chan error
	err       error // the first failure: publishing, an acknowledgement or the confirmation
	acked     int   // acknowledgements received so far
	// Room for acks and sends when the message is forwarded to one variant, as most are.
	ack1  [1]jetstream.PubAckFuture
	send1 [1]trace.Span
}

// wait waits for the outbox's acknowledgements and then its confirmation; false when by fires first, and wait is
// called again to go on (each future and the confirmation is read once).
func (ob *outbox) wait(ctx context.Context, by <-chan time.Time) bool {
	for ob.err == nil && ob.acked < len(ob.acks) {
		f := ob.acks[ob.acked]
		select {
		case <-f.Ok():
			ob.acked++
		case err := <-f.Err():
			ob.sends[ob.acked].SetStatus(codes.Error, err.Error())
			ob.err = fmt.Errorf("publish to %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			ob.err = ctx.Err()
		case <-by:
			return false
		}
	}
	if ob.err == nil && ob.confirmed != nil {
		select {
		case ob.err = <-ob.confirmed: // the report's own timeout ends it
			ob.confirmed = nil
		case <-by:
			return false
		}
	}
	for _, sp := range ob.sends {
		sp.End()
	}
	return true
}

// publishOut publishes in's sub-requests and sends its leaves to the frontend, what to wait for into ob.
func (w *Worker) publishOut(ctx context.Context, s *serving, in *inbound, ob *outbox) error {
	path := &leafPath{path: wire.AppendPath(in.path, s.a.Key())}
	var leaves []wire.ItemResult
	now := time.Now()
	when := hop.When{Now: now.UnixNano(), AtTask: now.Sub(in.enqueued), Left: in.deadline.Sub(now)}
	s.refreshStage()
	if s.gear != nil { // the gear for these items, from the load this replica takes
		s.gear.Observe(now, len(in.items))
		if th := s.gear.Threshold(); th != s.table.Threshold() {
			w.log.Debug("gear switched", "task", s.a.Task, "variant", s.a.Variant, "threshold", th,
				"items_per_s", s.gear.Rate())
		}
		s.table = s.geared.For(s.gear.Threshold())
	}
	for i := range in.items {
		var err error
		if leaves, err = w.forwardItem(s, in, i, path, when, leaves, ob); err != nil {
			return err
		}
	}
	for _, l := range leaves {
		if l.Status == wire.ItemDropped {
			in.span.SetAttributes(telemetry.AttrDropReason.String(l.Reason))
			break
		}
	}
	if len(leaves) > 0 {
		data, err := msgpack.Marshal(&wire.ResultMessage{RequestID: in.requestID, Items: leaves})
		if err != nil {
			return err
		}
		c := make(chan error, 1)
		go func() { c <- w.report(ctx, in, data) }()
		ob.confirmed = c
	}
	return nil
}

// forwardItem forwards in's i-th item as the hop step routes it: its sub-requests published (into ob), and its
// leaves appended to leaves: the item itself when it has no sub-requests (finished, dropped or failed), else the
// sub-requests the step drops.
func (w *Worker) forwardItem(s *serving, in *inbound, i int, path *leafPath, when hop.When,
	leaves []wire.ItemResult, ob *outbox) ([]wire.ItemResult, error) {
	it := in.items[i]
	st := in.status[i]
	if st == "" {
		w.items.Add(1)
	}
	out := in.outputs[i]
	// Sub-requests are numbered across child tasks in the spec's order, so a re-execution names them the same.
	s.children, s.childInputs = s.children[:0], s.childInputs[:0]
	// An item for a join task is a part of it: reported to the request's frontend, which joins the parts
	// (docs/design.md, "Joins"), with its outputs.
	if st == "" && s.spec.JoinAfter(s.task.Name) == nil {
		for c, child := range s.table.Children {
			for _, inputs := range out.Children[child] {
				s.children = append(s.children, c)
				s.childInputs = append(s.childInputs, inputs)
			}
		}
	}
	var step *hop.Out
	if len(s.children) > 0 {
		var err error
		if step, err = s.step.Step(s.table, hop.Item{Den: it.Den, Children: s.children}, when, w.rng); err != nil {
			st, in.reason[i] = wire.ItemError, err.Error()
			out.Tensors = nil // a failed leaf carries no outputs
		}
	}
	if step == nil {
		if st == "" {
			if next, _ := s.table.Escalate(out.Confidence, when.Left); next != "" {
				return leaves, w.escalate(s, in, it, path.path, next, ob)
			}
			st = wire.ItemOK
		}
		hops := path.hops()
		switch st {
		case wire.ItemDropped:
			w.countDrop(s, in.reason[i])
		case wire.ItemError:
			w.failed.Add(1)
		case wire.ItemDegraded:
			w.countDegraded(s, in.reason[i])
			hops = wire.SplitPath(in.path) // not executed here: the answer is its parent's
		}
		gear := it.Gear // sent on under a gear: counted at its level
		if s.table.Geared() && st == wire.ItemOK {
			gear = s.table.Threshold() // kept here under a gear
		}
		return append(leaves, wire.ItemResult{ID: it.ID, Den: it.Den, Path: hops,
			Status: st, Reason: in.reason[i], Outputs: out.Tensors, Gear: gear}), nil
	}
	if step.Rerouted > 0 {
		w.rerouted.Add(uint64(step.Rerouted))
		w.observe(s, func(o *Observed) { o.Rerouted += uint64(step.Rerouted) })
	}
	for _, d := range step.Drops {
		if d.Degraded { // answered with what this item made for it
			leaves = append(leaves, wire.ItemResult{ID: wire.ChildItemID(it.ID, d.Sub), Den: step.Den,
				Path: path.hops(), Status: wire.ItemDegraded, Reason: d.Reason, Outputs: s.childInputs[d.Sub]})
			w.countDegraded(s, d.Reason)
			continue
		}
		leaves = append(leaves, wire.ItemResult{ID: wire.ChildItemID(it.ID, d.Sub), Den: step.Den,
			Path: path.hops(), Status: wire.ItemDropped, Reason: d.Reason})
		w.countDrop(s, d.Reason)
	}
	return leaves, w.publishStep(s, in, it.ID, path.path, step, ob)
}

// leafPath is the path a message's items took, with this hop: as the next hop's header, and split once for all of
// the message's leaves (the leaves of a message share it).
type leafPath struct {
	path  string
	split []string
	done  bool
}

func (p *leafPath) hops() []string {
	if !p.done {
		p.split, p.done = wire.SplitPath(p.path), true
	}
	return p.split
}

// publishStep publishes the messages of an item's hop step (its sub-requests, grouped by child variant) without
// waiting: their acknowledgements and "send" spans go into ob.
func (w *Worker) publishStep(s *serving, in *inbound, itemID, path string, step *hop.Out, ob *outbox) error {
	tm := &s.tm // encoded before the next is made: one for all
	defer func() { clear(tm.Items[:cap(tm.Items)]) }()
	for _, m := range step.Messages {
		tm.Items = tm.Items[:0]
		for _, n := range m.Subs {
			tm.Items = append(tm.Items, wire.Item{ID: wire.ChildItemID(itemID, n), Den: step.Den,
				Inputs: s.childInputs[n]})
		}
		task := s.table.Children[m.Child]
		// Named by what it carries, split or not: a parent executed again after a redelivery may route its
		// sub-requests otherwise (another routing draw, another plan, a reroute), and a message named only by
		// its variant would then be taken for the first execution's and dropped, with the sub-requests it
		// carries that the first one did not.
		id := wire.TaskPartMsgID(in.requestID, itemID, task, m.Variant, m.Subs)
		s.queues.note(task, m.Variant, len(m.Subs)) // before: nothing is done between the publishes and the wait
		if err := w.publishTask(s, in, task, m.Variant, path, id, tm, ob); err != nil {
			return err
		}
	}
	return nil
}

// publishTask publishes the task message carrying tm to task/variant without waiting: its acknowledgement and
// "send" span go into ob.
func (w *Worker) publishTask(s *serving, in *inbound, task, variant, path, id string, tm *wire.TaskMessage,
	ob *outbox) error {
	msg, send := w.taskMsg(s, in, task, variant, path, id, tm)
	ob.sends = append(ob.sends, send)
	f, err := w.js.PublishMsgAsync(msg)
	if err != nil {
		return fmt.Errorf("publish to %s: %w", msg.Subject, err)
	}
	ob.acks = append(ob.acks, f)
	return nil
}

// escalate sends item it on to its cascade's next variant (pkg/hop.Table.Escalate), as a reroute goes: the same
// item (id, weight, inputs), deadline and request, one hop further on its path; named by the item, so that a
// redelivered message sends it once.
func (w *Worker) escalate(s *serving, in *inbound, it wire.Item, path, next string, ob *outbox) error {
	id := wire.TaskMsgID(in.requestID, it.ID, s.a.Task, next)
	if s.table.Geared() {
		it.Gear = s.table.Threshold()
	}
	tm := &wire.TaskMessage{Items: []wire.Item{it}}
	if err := w.publishTask(s, in, s.a.Task, next, path, id, tm, ob); err != nil {
		return err
	}
	w.observe(s, func(o *Observed) { o.Escalated++ })
	return nil
}

// taskMsg is the task message carrying tm to task/variant, de-duplicated by id, and its "send" span (a child of
// in's), whose context the message carries. A message whose own span has no trace context and records nothing (no
// tracer) sends without one: its span would be the same nothing, and made per message.
func (w *Worker) taskMsg(s *serving, in *inbound, task, variant, path, id string,
	tm *wire.TaskMessage) (*nats.Msg, trace.Span) {
	d := s.dest(task, variant)
	msg := &nats.Msg{Subject: d.subject, Data: wire.AppendTaskMessage(nil, tm),
		Header: wire.TaskHeaders{RequestID: in.requestID, Deadline: in.deadline, Path: path, ReplyTo: in.replyTo,
			MsgID: id}.Header(1)} // room for a traceparent
	if !in.traced {
		return msg, untracedSpan
	}
	send := d.sends.Start(in.ctx, w.tracer, bus.HeaderCarrier(msg.Header))
	if send.IsRecording() {
		send.SetAttributes(semconv.MessagingMessageID(id), telemetry.AttrItems.Int(len(tm.Items)),
			telemetry.AttrTask.String(task), telemetry.AttrVariant.String(variant))
	}
	return msg, send
}

// untracedSpan is the span of a message sent without a trace context: it does nothing.
var untracedSpan = trace.SpanFromContext(context.Background())

// Confirmed results (docs/faults.md, "Results at least once").
const (
	// confirmWait bounds the wait for a frontend's confirmation of a batch's result messages. A frontend confirms as
	// it records, in well under a millisecond, but one starved of CPU may take long: with 500 ms, workers sent their
	// results again to frontends that had them (make chaos on a machine at load 30: 29 given up), which a frontend
	// behind can least afford. Waiting costs nothing while the server is away: the worker can fetch nothing then.
	confirmWait = 2 * time.Second
	// resultGrace is how long past a request's deadline its leaves are still reported: its frontend has answered it
	// late by then, and a late report only tells it the work was done (and make chaos counts that).
	resultGrace = 5 * time.Second
)

// report sends a message's leaves to the frontend that owns its request, as a request: the frontend answers once it
// has recorded them. A plain publish was lost when the server restarted with it in flight, or when the worker's
// reconnect flushed it before the frontend had subscribed again, and the request went late with its work done. An
// unconfirmed report fails the message, which is then redelivered and executed again (the frontend counts a leaf
// once); past the deadline and resultGrace it is given up (counted) so that the message is not retried forever for a
// frontend that is gone.
func (w *Worker) report(ctx context.Context, in *inbound, data []byte) error {
	rctx, cancel := context.WithTimeout(ctx, confirmWait)
	defer cancel()
	_, err := w.nc.RequestMsgWithContext(rctx, &nats.Msg{Subject: in.replyTo, Data: data})
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && time.Now().After(in.deadline.Add(resultGrace)) {
		w.abandoned.Add(1)
		w.complaints.Warn("result not confirmed by its frontend; given up", "to", in.replyTo, "err", err)
		return nil
	}
	w.unconfirmed.Add(1)
	return fmt.Errorf("report to %s not confirmed: %w", in.replyTo, err)
}
