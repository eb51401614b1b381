package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestPolicyWorkerAvoidsALongQueue is TestQueueAwareWorkerAvoidsALongQueue with routing_mode ramsis: the detector
// computes the classifier's policy in a goroutine when it reads the plan, and, once it has it, sends its 24 objects
// to the fast variant: with 40 messages queued at the accurate one (750 ms of batches on its replica) a frame due in
// 600 ms is late there, not at the fast one. The tables send them to the accurate one's queue.
func TestPolicyWorkerAvoidsALongQueue(t *testing.T) {
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
	// The policy of the plan that hosts cls/small (the last one put), not of the one before it: the frame is routed
	// by the tables until then.
	if err := testrig.WaitFor(30*time.Second, "the classifier's policy and the detector's reading of the queues",
		func() bool {
			p := det.policiesFor.Load()
			depth, read := det.queues.Depth("cls", "big")
			return p != nil && p.Find("cls", "small") != nil && read && depth >= 40
		}); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(wire.TaskSubject(r.spec.Name, "det", "d"))
	m.Header.Set(wire.HeaderRequestID, "frame")
	m.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(time.Now().Add(600*time.Millisecond)))
	m.Header.Set(wire.HeaderReplyTo, r.reply)
	m.Data, _ = msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: wire.RootItemID, Den: 1}}})
	if _, err := r.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	for leaves := 0; leaves < 24; {
		var rm wire.ResultMessage
		select {
		case rm = <-r.results:
		case <-time.After(10 * time.Second):
			// Where the objects went says which part failed: queued at cls/big, the tables routed them.
			st, err := r.js.Stream(ctx, wire.TaskStream(r.spec.Name))
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(ctx, jetstream.WithSubjectFilter(wire.TaskSubjects(r.spec.Name)))
			if err != nil {
				t.Fatal(err)
			}
			t.Fatalf("no result message after %d leaves; messages per subject: %v", leaves, info.State.Subjects)
		}
		for _, it := range rm.Items {
			if rm.RequestID != "frame" || it.Status != wire.ItemOK || strings.Join(it.Path, ",") != "det/d,cls/small" {
				t.Fatalf("leaf of %s %+v: want the frame's objects served by cls/small", rm.RequestID, it)
			}
			leaves++
		}
	}
}
