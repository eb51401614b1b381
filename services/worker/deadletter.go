// Setting aside the task messages a worker will not execute: those delivered as many times as the consumer's bound
// (the workers that took them died, or could not finish them, every time) and those that are not task messages.

package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// errRedelivered marks a message decode refuses because it reached the consumer's delivery bound.
var errRedelivered = errors.New("delivered as many times as the bound without being acknowledged")

// checkDeliveries refuses a message whose delivery (its metadata's NumDelivered) is the one at which the consumer's
// bound (bus.SetAsideDue of its MaxDeliver) says to set it aside rather than execute it again.
func checkDeliveries(s *serving, meta *jetstream.MsgMetadata) error {
	if meta == nil {
		return nil // not a JetStream delivery: nothing to count
	}
	if bus.SetAsideDue(meta.NumDelivered, s.maxDeliver()) {
		return fmt.Errorf("%w (%d deliveries)", errRedelivered, meta.NumDelivered)
	}
	return nil
}

// maxDeliver is the consumer's delivery bound as it was when the worker bound it (-1 or 0: none).
func (s *serving) maxDeliver() int {
	if info := s.consumer.CachedInfo(); info != nil {
		return info.Config.MaxDeliver
	}
	return -1
}

// setAside takes a message out of the queue for good, keeping it for an operator: a copy, with every header it had
// and the reason, goes to the dead-letter stream (wire.DeadLetterSubject); once the stream has confirmed it, its
// request is answered error at once (when its request id and result subject are readable), it is counted, and it
// is terminated. A copy the stream did not confirm is not lost: the message is handed back to be delivered again
// (the consumer keeps a delivery in reserve for this), and only at its last delivery is it dropped, aloud.
func (w *Worker) setAside(ctx context.Context, s *serving, m jetstream.Msg, why error) {
	reason := wire.SetAsideUndecodable
	if errors.Is(why, errRedelivered) {
		reason = wire.SetAsideRedelivered
	}
	if reason == wire.SetAsideUndecodable {
		w.discarded.Add(1)
	}
	var delivered uint64
	if meta, err := m.Metadata(); err == nil {
		delivered = meta.NumDelivered
	}
	out := nats.NewMsg(wire.DeadLetterSubject(s.a.Pipeline, s.a.Task, s.a.Variant))
	for k, v := range m.Headers() {
		out.Header[wire.SetAsideHeader(k)] = append([]string(nil), v...)
	}
	out.Header.Set(wire.HeaderSetAsideReason, reason)
	out.Header.Set(wire.HeaderSetAsideError, headerText(why.Error()))
	out.Header.Set(wire.HeaderSetAsideSubject, m.Subject())
	out.Header.Set(wire.HeaderSetAsideDeliveries, strconv.FormatUint(delivered, 10))
	out.Header.Set(wire.HeaderSetAsideWorker, w.cfg.ID)
	out.Data = m.Data()
	pctx, cancel := context.WithTimeout(ctx, w.cfg.AckWait)
	_, err := w.js.PublishMsg(pctx, out)
	cancel()
	last := s.maxDeliver() > 0 && delivered >= uint64(s.maxDeliver())
	if err != nil && !last {
		w.log.Warn("could not set a task message aside; it will be delivered again", "subject", m.Subject(),
			"reason", reason, "deliveries", delivered, "err", err)
		_ = m.NakWithDelay(w.cfg.AckWait)
		return
	}
	if err != nil {
		// JetStream delivers it no more: answered and logged whole, so it is not lost silently.
		w.log.Error("could not set a task message aside at its last delivery; dropping it", "subject", m.Subject(),
			"reason", reason, "deliveries", delivered, "headers", m.Headers(), "bytes", len(m.Data()), "err", err)
	}
	w.answerSetAside(m.Headers(), reason, why)
	if c := w.setAsideCounts[reason]; c != nil {
		c.Add(1)
	}
	w.complaints.Warn("set a task message aside", "subject", m.Subject(), "reason", reason,
		"deliveries", delivered, "err", why)
	_ = m.TermWithReason("set aside: " + reason)
}

// answerSetAside fails the request of a message set aside, at once, when its headers say where to answer.
func (w *Worker) answerSetAside(h nats.Header, reason string, why error) {
	id, replyTo, err := wire.ReadReplyAddress(h.Get)
	if err != nil {
		return
	}
	data, err := msgpack.Marshal(&wire.ResultMessage{RequestID: id,
		Error: "a task message of the request was set aside (" + reason + "): " + why.Error()})
	if err == nil {
		err = w.nc.Publish(replyTo, data)
	}
	if err != nil {
		w.log.Warn("could not answer the request of a message set aside", "request", id, "err", err)
	}
}

// maxHeaderText bounds what of an error a header carries.
const maxHeaderText = 512

// headerText is s as a header value: one line, at most maxHeaderText bytes.
func headerText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxHeaderText {
		s = s[:maxHeaderText]
	}
	return s
}
