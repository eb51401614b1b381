package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sleipnir-serving/sleipnir/pkg/batching"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/gears"
	"github.com/sleipnir-serving/sleipnir/pkg/telemetry"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// fetchFirst waits (up to FetchWait) for one message of the variant's queue.
func (w *Worker) fetchFirst(s *serving) jetstream.Msg {
	msgs, err := s.puller.Fetch(1, w.cfg.FetchWait)
	if err != nil {
		// Disconnected, or the server is restarting: back off instead of spinning.
		w.log.Debug("fetch failed", "err", err)
		time.Sleep(100 * time.Millisecond)
		return nil
	}
	if len(msgs) == 0 {
		return nil
	}
	return msgs[0]
}

// fetchMore takes, without waiting, the messages the batching rule adds to a batch of at most maxBatch items that
// executes taken items so far (pending, the NumPending of the newest message delivered, says how many wait,
// without a round trip).
func (w *Worker) fetchMore(s *serving, pending uint64, taken, maxBatch int) []jetstream.Msg {
	n := batching.More(maxBatch, taken, int(pending))
	if n == 0 {
		return nil
	}
	batch, err := s.consumer.FetchNoWait(n)
	if err != nil {
		return nil
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	return msgs
}

// inbound is one valid task message of a batch.
type inbound struct {
	msg       jetstream.Msg
	meta      *jetstream.MsgMetadata // parsed once (nil: not a JetStream delivery)
	requestID string
	deadline  time.Time
	path      string // hops before this one
	replyTo   string
	enqueued  time.Time // when it reached this variant's queue: the start of its time at this task
	ctx       context.Context
	span      trace.Span
	traced    bool // span has a trace context or records: the messages it sends carry theirs
	items     []wire.Item
	outputs   []executor.Output // aligned with items; nil entries for items not executed
	status    []string          // per item: "" executed, or the item status it ends with here
	reason    []string
	out       outbox // what forwarding it waits for
	// Room for the three slices above when it carries one item, as most do: none made per message.
	output1          [1]executor.Output
	status1, reason1 [1]string
}

// round is what one serveOnce executes: the messages it took, and their items' inputs in model order (the
// serving's scratch, reused by its next round), and then its settlement.
type round struct {
	msgs   []*inbound
	inputs []executor.Input
	slots  []slot // where each input's output goes
	// now is when the round was assembled: drops and queue waits are reckoned from it.
	now time.Time
	// maxBatch is its max batch once it takes an item (0 before): the assignment's, or under gears the smallest of
	// its items' gears' (gears.MaxBatch).
	maxBatch int
	settled  settlement
	msg1     [1]*inbound // room for msgs when it takes one message
}

// serveOnce assembles a batch of the variant's messages, executes it, and forwards its results; the batch is
// acknowledged beside the next one (settle).
func (w *Worker) serveOnce(ctx context.Context, s *serving) {
	queued, pending, ok := w.nextQueued(ctx, s)
	if !ok {
		return
	}
	s.refreshStage()
	r := &round{now: time.Now(), inputs: s.inputs[:0], slots: s.slots[:0]}
	r.msgs = r.msg1[:0]
	defer func() { // the scratch kept for the next round, holding nothing of this one
		clear(r.inputs)
		clear(r.slots)
		s.inputs, s.slots = r.inputs[:0], r.slots[:0]
	}()
	take := func(in *inbound) bool { return w.take(ctx, s, r, in) }
	// Batch slots count items, and one message may carry several (a parent's items for one variant, or a share of
	// them: pkg/hop).
	rest := takeAll(queued, take)
	if rest == nil {
		var more []*inbound
		for _, m := range w.fetchMore(s, pending, len(r.inputs), cmp.Or(r.maxBatch, s.a.MaxBatch)) {
			if in := w.admit(ctx, s, m); in != nil {
				more = append(more, in)
			}
		}
		rest = takeAll(more, take)
	}
	w.returnUnfit(s, rest)
	if span := w.startBatchSpan(ctx, s, r.msgs, len(r.inputs)); span != nil {
		defer span.End()
	}
	// A batch that runs longer than a third of the ack wait is marked in progress, so that JetStream does not hand
	// it to another replica while this one is alive; until its results are confirmed too (settle).
	marked := r.msgs
	if len(s.carried) > 0 {
		marked = append(r.msgs[:len(r.msgs):len(r.msgs)], s.carried...)
	}
	st := &r.settled
	st.batch, st.marks, st.marked = r.msgs, &s.inProgress, s.inProgress.add(marked, w.ackWait(s))
	settling := false
	defer func() {
		if !settling {
			st.finish()
		}
	}()
	if !w.executeRound(ctx, s, r) {
		return
	}
	for _, in := range r.msgs {
		w.forward(ctx, s, in)
	}
	settling = true
	// The bookkeeping once the batch is settled or settling beside: the client's flusher, woken by the publishes,
	// runs on this thread once it waits, and work done before then holds the publishes back (BenchmarkHop).
	defer w.observeRound(s, r)
	// A batch with nothing known to wait behind it and no results to confirm is settled before the next pull, for
	// up to settleInline: a pull and acknowledgements sent beside the server's delivery of what the batch published
	// slowed that delivery (BenchmarkHop), and the next pull has nothing to take sooner. A frontend's confirmation
	// can take much longer than a publish's acknowledgement on a busy machine, and messages that come meanwhile
	// would wait for it: a batch with results is settled beside the next batch, as is one past settleInline.
	if len(s.carried) == 0 && (len(r.msgs) == 0 || r.msgs[len(r.msgs)-1].numPending() == 0) && !st.reports() {
		if s.settleBy == nil {
			s.settleBy = time.NewTimer(settleInline)
		} else {
			s.settleBy.Reset(settleInline)
		}
		settled := w.settle(ctx, st, s.settleBy.C)
		s.settleBy.Stop()
		if settled {
			return
		}
	}
	go w.settle(ctx, st, nil)
}

// nextQueued gives the messages a batch begins with: those the last batch carried (they did not fit it), else the
// queue's first if it is a task message; and the NumPending of the newest message delivered, how many more wait
// (ok false: none came within FetchWait).
func (w *Worker) nextQueued(ctx context.Context, s *serving) (queued []*inbound, pending uint64, ok bool) {
	queued = s.carried
	s.carried = nil
	if len(queued) > 0 {
		return queued, queued[len(queued)-1].numPending(), true
	}
	first := w.fetchFirst(s)
	if first == nil {
		return nil, 0, false
	}
	if in := w.admit(ctx, s, first); in != nil {
		s.first[0] = in // the slice is read, not kept (what is carried is copied)
		return s.first[:], in.numPending(), true
	}
	if meta, err := first.Metadata(); err == nil {
		pending = meta.NumPending
	}
	return nil, pending, true
}

// numPending is the NumPending of in's delivery: how many messages waited behind it.
func (in *inbound) numPending() uint64 {
	if in.meta == nil {
		return 0
	}
	return in.meta.NumPending
}

// take adds a message to the round; false when the items it would execute do not fit (batching.Fits).
func (w *Worker) take(ctx context.Context, s *serving, r *round, in *inbound) bool {
	stage, maxBatch := s.stage, s.a.MaxBatch
	if s.geared != nil { // its items' gear's stage and max batch
		th := gears.ItemGear(in.gear(), s.gear)
		stage = s.geared.For(th).Stage
		maxBatch = gears.MaxBatch(s.plan, s.a.Task, s.a.Variant, s.a.MaxBatch, th)
	}
	maxBatch = r.limit(maxBatch)
	drop := stage.BeforeExecute(r.now.UnixNano(), in.deadline.UnixNano(), in.enqueued.UnixNano(),
		len(r.inputs)+len(in.items), int(min(in.numPending(), math.MaxInt32)))
	// The delivery bound is for messages that would be executed again: one dropped here costs nothing, and is
	// answered as dropped, not set aside as poison (a busy machine's late messages reach the bound too).
	if drop == "" {
		if err := checkDeliveries(s, in.meta); err != nil {
			in.span.End()
			w.setAside(ctx, s, in.msg, err)
			return true
		}
	}
	if drop == "" {
		if !batching.Fits(maxBatch, len(r.inputs), len(in.items)) {
			return false
		}
		r.maxBatch = maxBatch
	}
	w.messages.Add(1)
	if len(in.items) == 1 {
		in.outputs, in.status, in.reason = in.output1[:], in.status1[:], in.reason1[:]
	} else {
		in.outputs = make([]executor.Output, len(in.items))
		in.status = make([]string, len(in.items))
		in.reason = make([]string, len(in.items))
	}
	// Policy degrade answers a sub-request too late for this task with its parent's result: its inputs.
	degrade := drop != "" && in.path != "" && deadline.Answers(stage.Policy, drop)
	for i, it := range in.items {
		if degrade {
			in.status[i], in.reason[i], in.outputs[i].Tensors = wire.ItemDegraded, drop, it.Inputs
			continue
		}
		if drop != "" {
			in.status[i], in.reason[i] = wire.ItemDropped, drop
			continue
		}
		if err := s.checkItem(it); err != nil {
			w.complaints.Warn(ComplainItem, "subject", in.msg.Subject(), "request", in.requestID, "item", it.ID, "err", err)
			in.status[i], in.reason[i] = wire.ItemError, "invalid task message: "+err.Error()
			continue
		}
		r.inputs = append(r.inputs, executor.Input{RequestID: in.requestID, ItemID: it.ID, Tensors: it.Inputs})
		r.slots = append(r.slots, slot{in: in, i: i})
	}
	r.msgs = append(r.msgs, in)
	return true
}

// executeRound executes the round in model batches of at most its max batch (one message may carry several
// items), and gives each item its output or its error. False: the worker is shutting down, and the round's
// messages, and those carried, are handed back for another replica.
func (w *Worker) executeRound(ctx context.Context, s *serving, r *round) bool {
	for c := range batching.Chunks(len(r.inputs), r.maxBatch) {
		lo := c * r.maxBatch
		hi := min(lo+r.maxBatch, len(r.inputs))
		began := time.Now()
		outs, err := w.execute(ctx, s, r.inputs[lo:hi])
		ended := time.Now()
		s.metrics.Batch(hi-lo, ended.Sub(began))
		if err == nil {
			w.measure(s, hi-lo, began, ended)
		}
		w.batches.Add(1)
		if err == nil && len(outs) != hi-lo {
			err = fmt.Errorf("executor returned %d outputs for %d inputs", len(outs), hi-lo)
		}
		if err != nil && ctx.Err() != nil {
			for _, in := range r.msgs {
				_ = in.msg.Nak()
				in.span.End()
			}
			s.handBack()
			return false
		}
		for j := lo; j < hi; j++ {
			sl := r.slots[j]
			itemErr := err // the batch's, or else the item's own
			if itemErr == nil {
				itemErr = outs[j-lo].Err
			}
			if itemErr != nil {
				sl.in.status[sl.i], sl.in.reason[sl.i] = wire.ItemError, itemErr.Error()
				continue
			}
			sl.in.outputs[sl.i] = outs[j-lo]
		}
	}
	return true
}

// observeRound adds the round to what the worker observed: batches, messages, the items executed with their queue
// waits, and the sub-requests they made.
func (w *Worker) observeRound(s *serving, r *round) {
	w.observe(s, func(o *Observed) {
		o.Batches += uint64(batching.Chunks(len(r.inputs), r.maxBatch))
		o.Messages += uint64(len(r.msgs))
		for _, sl := range r.slots {
			if sl.in.status[sl.i] != "" {
				continue // failed
			}
			o.Items++
			o.QueueWaitMs += float64(r.now.Sub(sl.in.enqueued)) / float64(time.Millisecond)
			s.metrics.QueueWait(r.now.Sub(sl.in.enqueued))
			k := 0
			for child, subs := range sl.in.outputs[sl.i].Children {
				o.Children[child] += uint64(len(subs))
				k += len(subs)
			}
			if len(s.task.Children) > 0 { // the plan check's distribution of sub-requests
				o.CountSubRequests(k)
			}
		}
	})
}

// startBatchSpan starts the span of a batch's execution, and gives each message's span the batch's size. Its
// messages belong to many requests, so to many traces: it links to each message's span (the conventions' way to
// correlate a batch). A batch of one message has none (nil): the message's span says all it would, and a span
// fewer per hop is a measurable share of a hop's time (BenchmarkHop).
func (w *Worker) startBatchSpan(ctx context.Context, s *serving, batch []*inbound, items int) trace.Span {
	for _, in := range batch {
		if in.span.IsRecording() {
			in.span.SetAttributes(telemetry.AttrBatchSize.Int(items))
		}
	}
	if len(batch) < 2 {
		return nil
	}
	links := make([]trace.Link, len(batch))
	for i, in := range batch {
		links[i] = trace.Link{SpanContext: in.span.SpanContext()}
	}
	_, span := w.tracer.Start(ctx, "execute "+s.a.Key().String(), trace.WithLinks(links...),
		trace.WithAttributes(semconv.MessagingBatchMessageCount(len(batch)), telemetry.AttrBatchSize.Int(items),
			telemetry.AttrPipeline.String(s.a.Pipeline), telemetry.AttrTask.String(s.a.Task),
			telemetry.AttrVariant.String(s.a.Variant)))
	return span
}

// ackWait is the ack wait of the variant's consumer (as last read), or the configured one.
func (w *Worker) ackWait(s *serving) time.Duration {
	if info := s.consumer.CachedInfo(); info != nil && info.Config.AckWait > 0 {
		return info.Config.AckWait
	}
	return w.cfg.AckWait
}

type slot struct {
	in *inbound
	i  int
}

// checkItem checks an item's tensors before anything reads them: a task message may come from anyone allowed to
// publish, not only a frontend or a worker. A root task's items are requests, checked as the frontend checks one;
// other items carry what a parent's executor made, checked for well-formedness (each executor's input readers refuse
// the rest).
func (s *serving) checkItem(it wire.Item) error {
	if s.root {
		return s.spec.CheckInputs(it.Inputs)
	}
	return wire.ValidateTensors(it.Inputs)
}

// execute runs one model batch. A panic in the executor fails the batch (its items end "error") instead of the
// worker: the message would be redelivered to the next worker, which would die too. It is logged, rate-limited,
// with its stack, and counted.
func (w *Worker) execute(ctx context.Context, s *serving, batch []executor.Input) (outs []executor.Output, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.metrics.Panicked()
			w.complaints.Error(ComplainPanic, "variant", s.a.Key(), "items", len(batch), "panic", r,
				"stack", string(debug.Stack()))
			outs, err = nil, fmt.Errorf("the executor panicked: %v", r)
		}
	}()
	return s.exec.Execute(ctx, batch)
}

// takeAll takes the messages in order until one does not fit, and gives that one and those after it (nil when all
// were taken).
func takeAll(ms []*inbound, take func(*inbound) bool) []*inbound {
	for i, in := range ms {
		if !take(in) {
			return ms[i:]
		}
	}
	return nil
}

// returnUnfit hands the messages that did not join a batch back to the queue, in order (JetStream delivers them
// again, before newer ones, to this replica's next batch or another's), except those handed back too often
// already, which it carries to this replica's next batch (batching.HandBack).
func (w *Worker) returnUnfit(s *serving, rest []*inbound) {
	w.returned.Add(uint64(len(rest)))
	for _, in := range rest {
		if in.meta != nil && batching.HandBack(in.meta.NumDelivered) {
			_ = in.msg.Nak()
			in.span.End()
			continue
		}
		s.carried = append(s.carried, in)
	}
}

// admit decodes a delivered message, or sets it aside (deadletter.go: not a task message) and gives nil.
func (w *Worker) admit(ctx context.Context, s *serving, m jetstream.Msg) *inbound {
	in, err := w.decode(ctx, s, m)
	if err != nil {
		w.setAside(ctx, s, m, err)
		return nil
	}
	return in
}

// handBack returns the messages carried for the next batch to the queue, in order, when the replica stops serving
// the variant: JetStream delivers them again, before newer ones, to another replica.
func (s *serving) handBack() {
	for _, in := range s.carried {
		_ = in.msg.Nak()
		in.span.End()
	}
	clear(s.carried)
	s.carried = s.carried[:0]
}

// decode validates one message of the variant's subject and starts its "process" span.
func (w *Worker) decode(ctx context.Context, s *serving, m jetstream.Msg) (*inbound, error) {
	h := m.Headers()
	th, err := wire.ReadTaskHeaders(h.Get)
	if err != nil {
		return nil, err
	}
	in := &inbound{msg: m, requestID: th.RequestID, path: th.Path, replyTo: th.ReplyTo, deadline: th.Deadline}
	if meta, err := m.Metadata(); err == nil {
		in.meta, in.enqueued = meta, meta.Timestamp
	} else {
		in.enqueued = time.Now()
	}
	tm, err := wire.DecodeTaskMessage(m.Data())
	if err != nil {
		return nil, fmt.Errorf("payload is not a msgpack task message: %w", err)
	}
	if len(tm.Items) == 0 {
		return nil, errors.New("task message has no items")
	}
	for _, it := range tm.Items {
		if it.ID == "" || it.Den == 0 {
			return nil, fmt.Errorf("item %q has no id or weight", it.ID)
		}
	}
	in.items = tm.Items
	in.ctx, in.span = s.process.StartGlobal(ctx, w.tracer, bus.HeaderCarrier(h))
	in.traced = in.span.SpanContext().IsValid() || in.span.IsRecording()
	if in.span.IsRecording() { // a message's own attributes cost nothing when its trace is not sampled
		in.span.SetAttributes(semconv.MessagingMessageID(th.MsgID),
			telemetry.AttrRequestID.String(in.requestID), telemetry.AttrItems.Int(len(tm.Items)),
			telemetry.AttrDeadlineSlackMs.Float64(float64(time.Until(in.deadline).Microseconds())/1000))
	}
	return in, nil
}

// gear is the gear its items were sent on at (wire.Item.Gear; 0: none): an item sent on goes alone in its message.
func (in *inbound) gear() float64 {
	if len(in.items) == 0 {
		return 0
	}
	return in.items[0].Gear
}

// limit is the round's max batch with a message of max batch maxBatch: the smaller of the two, maxBatch before the
// round takes an item.
func (r *round) limit(maxBatch int) int {
	if r.maxBatch == 0 {
		return maxBatch
	}
	return min(r.maxBatch, maxBatch)
}
