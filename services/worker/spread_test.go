package worker

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestParentSpreadOverReplicas: one parent with 24 sub-requests for a variant of max batch 8 with 4 free replicas
// finishes in about one batch latency: its sub-requests go in 4 messages of 6 that the replicas run at once. In
// one message they ran on one replica in 3 batches of 8, one after the other (about 3 batch latencies).
func TestParentSpreadOverReplicas(t *testing.T) {
	fan, err := os.ReadFile("../../pkg/hop/testdata/fan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := newRigWith(t, string(fan))
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

	m := nats.NewMsg(wire.TaskSubject(r.spec.Name, "det", "d"))
	m.Header.Set(wire.HeaderRequestID, "frame-1")
	m.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(time.Now().Add(time.Minute)))
	m.Header.Set(wire.HeaderReplyTo, r.reply)
	m.Data, _ = msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: wire.RootItemID, Den: 1}}})
	start := time.Now()
	if _, err := r.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
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
