package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// slowTask is oneTask with its slow variant taking 0.6 s a batch: three times the ack wait
// TestLongBatchIsKeptInProgress gives it.
var slowTask = strings.ReplaceAll(oneTask, "p50_ms: 30, p95_ms: 31", "p50_ms: 600, p95_ms: 600")

// TestLongBatchIsKeptInProgress: a batch that runs longer than its consumer's ack wait is marked in progress
// (keepInProgress), so JetStream does not deliver its message again to the other replica, idle and fetching: it is
// executed and answered once.
func TestLongBatchIsKeptInProgress(t *testing.T) {
	const ackWait = 200 * time.Millisecond
	r := newRigAckWait(t, slowTask, ackWait)
	got := r.collect(t)
	w1, w2 := r.startWorker("w1"), r.startWorker("w2")
	r.assign("w1", "slow")
	r.assign("w2", "slow")
	r.waitServing(w1, "slow")
	r.waitServing(w2, "slow")
	r.publish("slow", "long", time.Now().Add(time.Minute), nil, nil)
	testrig.Eventually(t, 10*time.Second, "the request answered", func() bool { return len(got.of("long")) > 0 })
	testrig.Consistently(t, 5*ackWait, "no second execution", func() bool {
		return w1.Stats().Items+w2.Stats().Items == 1
	})
	if rm := got.of("long"); len(rm) != 1 || rm[0].Items[0].Status != wire.ItemOK {
		t.Fatalf("answers %+v: want one, ok", rm)
	}
}

// TestInProgressMarksUntilRemoved: a batch added is marked in progress every third of its ack wait, so JetStream
// does not deliver its message again, and a wait on stuck ends at a mark; once removed, it is marked no more, and
// the message comes again after the ack wait.
func TestInProgressMarksUntilRemoved(t *testing.T) {
	const ackWait = 300 * time.Millisecond
	srv := testrig.Server(t)
	js := testrig.JetStream(t, srv.Connect(t, "test"))
	ctx := context.Background()
	if _, err := bus.EnsureTaskStream(ctx, js, "p", jetstream.MemoryStorage, 0); err != nil {
		t.Fatal(err)
	}
	c, err := bus.EnsureVariantConsumer(ctx, js, "p", "a", "x", ackWait)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, wire.TaskSubject("p", "a", "x"), []byte("m")); err != nil {
		t.Fatal(err)
	}
	fetch := func(wait time.Duration) jetstream.Msg {
		t.Helper()
		batch, err := c.Fetch(1, jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			return m
		}
		return nil
	}
	m := fetch(time.Second)
	if m == nil {
		t.Fatal("no message")
	}
	var p inProgress
	id := p.add([]*inbound{{msg: m}}, ackWait)
	for range 2 { // each mark ends a wait on stuck
		select {
		case <-p.stuck():
		case <-time.After(10 * ackWait):
			t.Fatal("no mark within ten ack waits")
		}
	}
	if again := fetch(2 * ackWait); again != nil {
		t.Fatalf("a message marked in progress was delivered again (%d deliveries)", deliveries(again))
	}
	p.remove(id)
	again := fetch(3 * ackWait)
	if again == nil || deliveries(again) != 2 {
		t.Fatal("a message no longer marked was not delivered again after its ack wait")
	}
}

func deliveries(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.NumDelivered
}
