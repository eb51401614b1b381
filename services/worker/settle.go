package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// settleInline bounds how long a worker with nothing waiting settles a batch before it pulls again: a few
// acknowledgement round trips on a quiet server, so that what arrives meanwhile waits little, and a worker whose
// server is busy or away (its publishes unacknowledged) goes on pulling with its batch settled beside it.
const settleInline = 100 * time.Microsecond

// settlement is a batch being settled: its messages, with their outboxes, in order, the first next not yet
// settled; marked is its id in marks (inProgress), removed once all are.
type settlement struct {
	batch  []*inbound
	next   int
	marks  *inProgress
	marked uint64
}

// finish ends the batch's marks in progress: it is settled, or handed back.
func (st *settlement) finish() { st.marks.remove(st.marked) }

// reports says whether a message of the batch reported results to its frontend, which confirms them.
func (st *settlement) reports() bool {
	for _, in := range st.batch {
		if in.out.confirmed != nil {
			return true
		}
	}
	return false
}

// settle acknowledges each message of a batch once its sub-requests are stored and its results confirmed, or hands
// it back, and then calls done; false when by fires first, and settle is called again to go on. Beside the next batch
// (by nil), a worker does not wait for the frontends' confirmations (a round trip through the server and a
// frontend's scheduling) before it fetches again.
func (w *Worker) settle(ctx context.Context, st *settlement, by <-chan time.Time) bool {
	for ; st.next < len(st.batch); st.next++ {
		in := st.batch[st.next]
		ob := &in.out
		if !ob.wait(ctx, by) {
			return false
		}
		if ob.err != nil {
			// Not acknowledged: JetStream delivers the message again; sub-requests already published are
			// de-duplicated by their message ids.
			w.log.Warn("forwarding failed; message will be redelivered", "request", in.requestID, "err", ob.err)
			_ = in.msg.NakWithDelay(redeliveryDelay(in.msg, ob.err))
		} else {
			_ = in.msg.Ack()
		}
		in.span.End()
	}
	st.finish()
	return true
}

// redeliveryDelay is how long a message whose forwarding failed (err) waits before it is delivered again: 100 ms,
// doubling with each delivery up to 800 ms; at least 1 s when its frontend had no subscription ("no responders": it
// is gone, or subscribing again after a server restart). By then the message's deadline has mostly passed, and it
// comes back to be dropped and reported, not executed again: a killed frontend's messages took the capacity its
// successor needed (make chaos frontend-kill). At least leaderlessWait when a child's stream had no leader (an
// election) or left a publish unanswered (a leader killed before it replied: Config.PublishAckTimeout): each
// delivery counts toward the consumers' bound on deliveries (pkg/bus.SetAsideAt), and a message with a far deadline
// must not reach it, and be set aside as poison, within one election.
func redeliveryDelay(m jetstream.Msg, err error) time.Duration {
	n := uint64(1)
	if meta, err := m.Metadata(); err == nil {
		n = max(1, meta.NumDelivered)
	}
	d := 100 * time.Millisecond << min(n-1, 3)
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		d = max(d, leaderlessWait)
	case errors.Is(err, nats.ErrNoResponders):
		d = max(d, time.Second)
	}
	return d
}

// leaderlessWait is the least wait before a message whose sub-requests found no stream leader is delivered again:
// the deliveries before the dead-letter bound, this far apart, outlast a raft election after a crash (4 to 9 s; the
// bound's five redeliveries take at least 10 s).
const leaderlessWait = 2 * time.Second
