package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
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
