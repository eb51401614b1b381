package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"go.opentelemetry.io/otel/trace"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
)

// deliveredMsg is a task message as JetStream delivers it for the n-th time: redeliveryDelay reads only that.
type deliveredMsg struct {
	jetstream.Msg
	n uint64
}

func (m deliveredMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{NumDelivered: m.n}, nil
}

// TestRedeliveryOutlastsAnElection: a message whose sub-requests keep finding no stream leader is delivered again
// no sooner than an election after a crash ends (9 s at most) before it reaches the dead-letter bound, so that it is
// not set aside as poison for an election; other failures are retried sooner.
func TestRedeliveryOutlastsAnElection(t *testing.T) {
	leaderless := fmt.Errorf("publish to sleipnir.task.p.b.x: %w", jetstream.ErrNoStreamResponse)
	var total time.Duration
	for n := uint64(1); n < bus.SetAsideAt; n++ {
		total += redeliveryDelay(deliveredMsg{n: n}, leaderless)
	}
	if total < 9*time.Second {
		t.Errorf("the deliveries before the dead-letter bound span %v of waits: an election may outlast them", total)
	}
	if d := redeliveryDelay(deliveredMsg{n: 1}, errors.New("other")); d != 100*time.Millisecond {
		t.Errorf("a first redelivery after another failure waits %v, want 100ms", d)
	}
	if d := redeliveryDelay(deliveredMsg{n: 1}, fmt.Errorf("report: %w", nats.ErrNoResponders)); d != time.Second {
		t.Errorf("a result with no frontend to confirm it waits %v, want 1s", d)
	}
}

// TestUnacknowledgedPublishFails: a sub-request's publish that nothing answers (a stream leader killed after it took
// the publish; here a subscriber that never answers) fails after the worker's PublishAckTimeout, and its message is
// delivered again no sooner than an election's wait, rather than held in progress, its batch unsettled, for ever.
func TestUnacknowledgedPublishFails(t *testing.T) {
	srv := testrig.Server(t)
	nc := srv.Connect(t, "worker")
	w, err := New(nc, Config{ID: "w", PublishAckTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.SubscribeSync("sleipnir.silent"); err != nil { // interest, and no reply
		t.Fatal(err)
	}
	f, err := w.js.PublishMsgAsync(&nats.Msg{Subject: "sleipnir.silent", Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	ob := outbox{acks: []jetstream.PubAckFuture{f}, sends: []trace.Span{untracedSpan}}
	if !ob.wait(context.Background(), time.After(10*time.Second)) {
		t.Fatal("the publish was neither acknowledged nor failed in 10 s")
	}
	if !errors.Is(ob.err, jetstream.ErrAsyncPublishTimeout) {
		t.Fatalf("the outbox's error is %v, want the publish's timeout", ob.err)
	}
	if d := redeliveryDelay(deliveredMsg{n: 1}, ob.err); d < leaderlessWait {
		t.Errorf("its message is delivered again after %v, want at least %v", d, leaderlessWait)
	}
}
