package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// queueFan: a detector of 24 objects a frame, a classifier with an accurate variant (one replica) and a fast one
// (four), both hosted; the routing tables send every object to the accurate one.
const queueFan = `
name: qfan
slo_ms: 5000
deadline_policy: none
routing_mode: queue
comm_latency_ms: 1
batch_sizes: [1, 2, 4, 6, 8]
tasks:
  - name: det
    children: [cls]
    variants:
      - {name: d, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 24, distribution: fixed},
         profile: [{batch: 1, p50_ms: 5, p95_ms: 5}, {batch: 2, p50_ms: 5, p95_ms: 5}, {batch: 4, p50_ms: 5, p95_ms: 5},
                   {batch: 6, p50_ms: 5, p95_ms: 5}, {batch: 8, p50_ms: 5, p95_ms: 5}]}
  - name: cls
    variants:
      - {name: big, accuracy: 0.9, executor: {kind: emulated},
         profile: [{batch: 1, p50_ms: 40, p95_ms: 40}, {batch: 2, p50_ms: 60, p95_ms: 60}, {batch: 4, p50_ms: 100, p95_ms: 100},
                   {batch: 6, p50_ms: 130, p95_ms: 130}, {batch: 8, p50_ms: 150, p95_ms: 150}]}
      - {name: small, accuracy: 0.7, executor: {kind: emulated},
         profile: [{batch: 1, p50_ms: 4, p95_ms: 4}, {batch: 2, p50_ms: 6, p95_ms: 6}, {batch: 4, p50_ms: 10, p95_ms: 10},
                   {batch: 6, p50_ms: 13, p95_ms: 13}, {batch: 8, p50_ms: 15, p95_ms: 15}]}
allocation:
  - {task: det, variant: d, replicas: 1, max_batch: 1}
  - {task: cls, variant: big, replicas: 1, max_batch: 8}
  - {task: cls, variant: small, replicas: 4, max_batch: 8}
`

// TestQueueAwareWorkerAvoidsALongQueue: the accurate classifier's queue holds 40 messages (nobody serves it); a
// frame due in 1 s has about 500 ms for the classification (half its time left), where 40 ahead of it on one
// replica take 5 batches of 8 (750 ms): the detector, reading the queues' state, sends its 24 objects to the fast
// variant, which answers them, where the tables send them to the accurate one's queue.
func TestQueueAwareWorkerAvoidsALongQueue(t *testing.T) {
	r := newRigWith(t, queueFan)
	ctx := context.Background()
	for i := range 40 {
		m := nats.NewMsg(wire.TaskSubject(r.spec.Name, "cls", "big"))
		m.Header.Set(wire.HeaderRequestID, fmt.Sprint("filler-", i))
		m.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(time.Now().Add(time.Minute)))
		m.Header.Set(wire.HeaderReplyTo, r.reply)
		m.Data, _ = msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: "0.0", Den: 1}}})
		if _, err := r.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	det, small := r.startWorker("det"), r.startWorker("small")
	r.assignTask("det", "det", "d", 1)
	r.assignTask("small", "cls", "small", 8)
	r.waitServingTask(det, "det", "d")
	r.waitServingTask(small, "cls", "small")
	if _, ok := det.queues.Depth("cls", "big"); !ok {
		// The detector reads the queues every queuePoll once it serves: wait for its first reading.
		deadline := time.Now().Add(5 * time.Second)
		for ; !ok && time.Now().Before(deadline); _, ok = det.queues.Depth("cls", "big") {
			time.Sleep(queuePoll)
		}
		if !ok {
			t.Fatal("the detector read no queue state within 5 s")
		}
	}
	m := nats.NewMsg(wire.TaskSubject(r.spec.Name, "det", "d"))
	m.Header.Set(wire.HeaderRequestID, "frame")
	m.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(time.Now().Add(time.Second)))
	m.Header.Set(wire.HeaderReplyTo, r.reply)
	m.Data, _ = msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: wire.RootItemID, Den: 1}}})
	if _, err := r.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	for leaves := 0; leaves < 24; {
		rm := r.next(10 * time.Second)
		for _, it := range rm.Items {
			if rm.RequestID != "frame" || it.Status != wire.ItemOK || strings.Join(it.Path, ",") != "det/d,cls/small" {
				t.Fatalf("leaf of %s %+v: want the frame's objects served by cls/small", rm.RequestID, it)
			}
			leaves++
		}
	}
}
