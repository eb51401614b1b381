package worker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestParentSpreadOverReplicas: one parent with 24 sub-requests for a variant of max batch 8 with 4 free replicas
// finishes in about one batch latency: its sub-requests go in 4 messages of 6 that the replicas run at once. In
// one message they ran on one replica in 3 batches of 8, one after the other (about 3 batch latencies).
func TestParentSpreadOverReplicas(t *testing.T) {
	r := newFanRig(t)
	det := r.startWorker("det")
	r.assignTask("det", "det", "d", 1)
	var cls []*Worker
	for i := range 4 {
		id := fmt.Sprint("cls", i)
		cls = append(cls, r.startWorker(id))
		r.assignTask(id, "cls", "c", 8)
	}
	r.waitServingTask(det, "det", "d")
	for _, w := range cls {
		r.waitServingTask(w, "cls", "c")
	}
	batch := time.Duration(r.spec.Variant("cls", "c").LatencyFor(8).P50Ms * float64(time.Millisecond))

	start := time.Now()
	publishFrame(r, "frame-1")
	leaves := map[string]bool{}
	for len(leaves) < 24 {
		rm := r.next(5 * time.Second)
		for _, it := range rm.Items {
			if it.Status != wire.ItemOK || it.Den != 24 || leaves[it.ID] {
				t.Fatalf("leaf %+v: want each of the 24 sub-requests once, ok, den 24", it)
			}
			leaves[it.ID] = true
		}
	}
	took := time.Since(start)
	t.Logf("24 sub-requests, max batch 8, 4 replicas: the parent took %v; one batch of 8 takes %v", took, batch)
	if took > batch*16/10 {
		t.Errorf("the parent took %v, over 1.6 times one batch latency (%v): its sub-requests did not spread over "+
			"the replicas", took, batch)
	}
	for _, w := range cls {
		if b := w.Stats().Batches; b > 1 {
			t.Errorf("replica %s ran %d batches, want at most 1", w.ID(), b)
		}
	}
}

// newFanRig is a rig serving pkg/hop/testdata/fan.yaml: a detector that finds 24 objects in every image, and a
// classifier of max batch 8 on 4 replicas whose batch of 8 takes 150 ms (6: 130 ms).
func newFanRig(t *testing.T) *rig {
	fan, err := os.ReadFile("../../pkg/hop/testdata/fan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return newRigWith(t, string(fan))
}

// publishFrame enqueues a root message for the detector, without a de-duplication id.
func publishFrame(r *rig, requestID string) {
	r.t.Helper()
	m := nats.NewMsg(wire.TaskSubject(r.spec.Name, "det", "d"))
	m.Header.Set(wire.HeaderRequestID, requestID)
	m.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(time.Now().Add(time.Minute)))
	m.Header.Set(wire.HeaderReplyTo, r.reply)
	m.Data, _ = msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: wire.RootItemID, Den: 1}}})
	if _, err := r.js.PublishMsg(context.Background(), m); err != nil {
		r.t.Fatal(err)
	}
}

// TestSplitParentExecutedTwiceEnqueuesOnce: a parent executed twice (as after a redelivery) publishes its 24
// sub-requests in the same 4 parts with the same ids, so the classifier's queue holds 4 messages, not 8; and the
// parts' ids differ, so none is taken for a duplicate of another (1 message would lose 18 sub-requests).
func TestSplitParentExecutedTwiceEnqueuesOnce(t *testing.T) {
	r := newFanRig(t)
	det := r.startWorker("det")
	r.assignTask("det", "det", "d", 1)
	r.waitServingTask(det, "det", "d")
	publishFrame(r, "frame-1")
	publishFrame(r, "frame-1")
	// Both parents are forwarded once the detector has acknowledged them: their parts' publishes were acknowledged.
	ctx := context.Background()
	info := func(consumer string) *jetstream.ConsumerInfo {
		t.Helper()
		c, err := r.js.Consumer(ctx, wire.TaskStream(r.spec.Name), consumer)
		if err != nil {
			t.Fatal(err)
		}
		i, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	if err := testrig.WaitFor(5*time.Second, "the detector forwards both parents", func() bool {
		i := info(wire.Consumer("det", "d"))
		return i.NumPending == 0 && i.NumAckPending == 0 && det.Stats().Messages == 2
	}); err != nil {
		t.Fatalf("%v: %+v", err, det.Stats())
	}
	pending := info(wire.Consumer("cls", "c")).NumPending
	if pending != 4 {
		t.Fatalf("the classifier's queue holds %d messages, want the 4 parts once", pending)
	}
}

// TestRegroupedParentLosesNothing: a parent's first execution sent sub-requests 0-2 of its 6 to the classifier and
// died before sending the others elsewhere (another variant, as its routing drew). Executed again, the parent sends
// the classifier all 6, in one message (they fit its max batch): named by the sub-requests it carries, it is not
// taken for a duplicate of the first execution's message and dropped with the sub-requests that one did not carry
// (named by its variant alone, it was: 3 of 6 lost).
func TestRegroupedParentLosesNothing(t *testing.T) {
	fan, err := os.ReadFile("../../pkg/hop/testdata/fan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const k = 6
	r := newRigWith(t, strings.Replace(string(fan), "mean: 24", "mean: 6", 1))
	ctx := context.Background()
	first := nats.NewMsg(wire.TaskSubject(r.spec.Name, "cls", "c"))
	first.Header.Set(wire.HeaderRequestID, "frame-1")
	first.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(time.Now().Add(time.Minute)))
	first.Header.Set(wire.HeaderReplyTo, r.reply)
	var subs []int
	tm := &wire.TaskMessage{}
	for i := 0; i < k/2; i++ {
		subs = append(subs, i)
		tm.Items = append(tm.Items, wire.Item{ID: wire.ChildItemID(wire.RootItemID, i), Den: k})
	}
	first.Data, _ = msgpack.Marshal(tm)
	// The first execution's message, under the id a whole message had before, and under its own content's.
	for _, id := range []string{wire.TaskMsgID("frame-1", wire.RootItemID, "cls", "c"),
		wire.TaskPartMsgID("frame-1", wire.RootItemID, "cls", "c", subs)} {
		first.Header.Set(wire.HeaderMsgID, id)
		if _, err := r.js.PublishMsg(ctx, first); err != nil {
			t.Fatal(err)
		}
	}
	det := r.startWorker("det")
	r.assignTask("det", "det", "d", 1)
	r.waitServingTask(det, "det", "d")
	publishFrame(r, "frame-1")
	c, err := r.js.Consumer(ctx, wire.TaskStream(r.spec.Name), wire.Consumer("cls", "c"))
	if err != nil {
		t.Fatal(err)
	}
	testrig.Eventually(t, 5*time.Second, "the detector forwards the parent", func() bool {
		return det.Stats().Messages >= 1
	})
	seen := map[string]bool{}
	// What has not reached the queue within 3 s is reported below, by sub-request.
	_ = testrig.WaitFor(3*time.Second, "every sub-request in the classifier's queue", func() bool {
		batch, err := c.FetchNoWait(100)
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			var got wire.TaskMessage
			if err := msgpack.Unmarshal(m.Data(), &got); err != nil {
				t.Fatal(err)
			}
			for _, it := range got.Items {
				seen[it.ID] = true
			}
			m.Ack()
		}
		return len(seen) >= k
	})
	for i := 0; i < k; i++ {
		if id := wire.ChildItemID(wire.RootItemID, i); !seen[id] {
			t.Errorf("sub-request %s never reached the classifier's queue", id)
		}
	}
}
