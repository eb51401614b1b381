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
// (inProgress), so JetStream does not deliver its message again to the other replica, idle and fetching: it is
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

// TestInProgressMarksEachBatchUntilRemoved: one timer marks every unsettled batch of a variant. Of two batches added,
// the one removed is marked no more and is delivered again after the ack wait, while the other, still marked, is
// not; once it is removed too, it comes again.
func TestInProgressMarksEachBatchUntilRemoved(t *testing.T) {
	const ackWait = time.Second // marks every third of it: slack for a busy machine's timers
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
	for _, data := range []string{"first", "second"} {
		if _, err := js.Publish(ctx, wire.TaskSubject("p", "a", "x"), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	fetch := func(n int, wait time.Duration) []jetstream.Msg {
		t.Helper()
		batch, err := c.Fetch(n, jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		var ms []jetstream.Msg
		for m := range batch.Messages() {
			ms = append(ms, m)
		}
		return ms
	}
	ms := fetch(2, time.Second)
	if len(ms) != 2 {
		t.Fatalf("fetched %d messages, want 2", len(ms))
	}
	var p inProgress
	first := p.add([]*inbound{{msg: ms[0]}}, ackWait)
	second := p.add([]*inbound{{msg: ms[1]}}, ackWait)
	p.remove(first)
	// A fetch can end before its wait (a status from the server): fetch again until the time is up.
	var again []jetstream.Msg
	for end := time.Now().Add(2 * ackWait); ; {
		left := time.Until(end)
		if left <= 0 {
			break
		}
		for _, m := range fetch(2, left) {
			_ = m.Ack() // not to come a third time
			again = append(again, m)
		}
	}
	if len(again) != 1 || string(again[0].Data()) != "first" {
		t.Fatalf("within two ack waits %d messages came again, want only the first (no longer marked)", len(again))
	}
	p.remove(second)
	for end := time.Now().Add(3 * ackWait); ; {
		left := time.Until(end)
		if left <= 0 {
			t.Fatal("the second, no longer marked, was not delivered again within three ack waits")
		}
		if again := fetch(1, left); len(again) == 1 {
			if string(again[0].Data()) != "second" {
				t.Fatalf("delivered again: %q, want the second", again[0].Data())
			}
			return
		}
	}
}
