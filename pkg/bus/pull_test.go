package bus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestPullerTakesWhatItAsksFor: a Puller bound to a variant's consumer takes one message per pull and no more (the
// others stay in the queue for other replicas), with its JetStream metadata, over one subscription however many
// pulls; its acknowledgements reach the server (a nak redelivers, a term with a reason removes); a pull on an empty
// queue gives nothing once its wait is over; Close leaves the consumer in place.
func TestPullerTakesWhatItAsksFor(t *testing.T) {
	_, js := inProcess(t)
	ctx := context.Background()
	if _, err := EnsureTaskStream(ctx, js, "p", jetstream.MemoryStorage, 0); err != nil {
		t.Fatal(err)
	}
	c, err := EnsureVariantConsumer(ctx, js, "p", "a", "x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"1", "2", "3"} {
		if _, err := js.Publish(ctx, wire.TaskSubject("p", "a", "x"), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	nc := js.Conn()
	subs := nc.NumSubscriptions()
	p, err := BindPuller(nc, "p", "a", "x")
	if err != nil {
		t.Fatal(err)
	}
	take := func(want string) jetstream.Msg {
		t.Helper()
		ms, err := p.Fetch(1, time.Second)
		if err != nil || len(ms) != 1 || string(ms[0].Data()) != want {
			t.Fatalf("fetch: %d messages, %v; want %q", len(ms), err, want)
		}
		return ms[0]
	}
	first := take("1")
	md, err := first.Metadata()
	// (md.NumPending is not checked: the server counts a new consumer's pending messages apart from deliveries,
	// and under load the first delivery may carry a count of 0; the consumer's info below is exact.)
	if err != nil || md.NumDelivered != 1 || md.Stream != wire.TaskStream("p") ||
		md.Consumer != wire.Consumer("a", "x") || md.Timestamp.IsZero() {
		t.Fatalf("metadata %+v, %v", md, err)
	}
	if info, err := c.Info(ctx); err != nil || info.NumAckPending != 1 || info.NumPending != 2 {
		t.Fatalf("after one pull: %d in hand, %d queued (%v); want 1 and 2: a pull takes what it asks for", info.NumAckPending, info.NumPending, err)
	}
	// Handed back and waited for: a nak sent without a reply is handled by the server apart from pull requests,
	// so a fetch sent at once may be served first, with the next message. Sent as a request, the server answers
	// once it has the message back (as DoubleAck does for an ack).
	if _, err := nc.Request(first.Reply(), []byte("-NAK"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	again := take("1") // handed back: first again
	if md, _ := again.Metadata(); md.NumDelivered != 2 {
		t.Fatalf("redelivered message: %d deliveries", md.NumDelivered)
	}
	if err := again.TermWithReason("set aside: test"); err != nil {
		t.Fatal(err)
	}
	second := take("2")
	if err := second.Ack(); err != nil {
		t.Fatal(err)
	}
	third := take("3")
	if err := third.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if n := nc.NumSubscriptions(); n != subs+1 {
		t.Errorf("%d subscriptions after five pulls, want %d: one for the Puller", n, subs+1)
	}
	if ms, err := p.Fetch(1, 200*time.Millisecond); err != nil || len(ms) != 0 {
		t.Fatalf("empty queue: %d messages, %v", len(ms), err)
	}
	if info, err := c.Info(ctx); err != nil || info.NumAckPending != 0 || info.NumPending != 0 {
		t.Fatalf("after term, ack, double ack: %d in hand, %d queued (%v)", info.NumAckPending, info.NumPending, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Consumer(ctx, wire.TaskStream("p"), wire.Consumer("a", "x")); err != nil {
		t.Fatalf("the consumer is gone after Close: %v", err)
	}
}
