package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/ramsis"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestPolicyWorkerAvoidsALongQueue is TestQueueAwareWorkerAvoidsALongQueue with routing_mode ramsis: the detector
// computes the classifier's policy in a goroutine when it reads the plan, and, once it has it, sends its 24 objects
// to the fast variant: with 40 messages queued at the accurate one (750 ms of batches on its replica) a frame due in
// 600 ms is late there, not at the fast one. The tables send them to the accurate one's queue.
func TestPolicyWorkerAvoidsALongQueue(t *testing.T) {
	solved, _ := ramsis.Solved()
	r := newRigWith(t, strings.Replace(strings.Replace(queueFan, "routing_mode: queue", "routing_mode: ramsis", 1),
		"name: qfan", "name: qfan-ramsis", 1))
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
	if err := testrig.WaitFor(30*time.Second, "the classifier's policy and the detector's reading of the queues",
		func() bool {
			n, _ := ramsis.Solved()
			_, read := det.queues.Depth("cls", "big")
			return n > solved && read
		}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the goroutine marks the policy ready just after computing it
	m := nats.NewMsg(wire.TaskSubject(r.spec.Name, "det", "d"))
	m.Header.Set(wire.HeaderRequestID, "frame")
	m.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(time.Now().Add(600*time.Millisecond)))
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
