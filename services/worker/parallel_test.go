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

// TestParallelBranchesGetEveryItemOnce: a task with parallel children sends every item to each of them, one copy
// each, beside the children its fan-out splits by shares (pkg/hop/testdata/parallel.yaml: every image to the
// detector and the captioner, 2 crops to the classifier). Each of 20 requests gets exactly one detector leaf, one
// captioner leaf and two classifier leaves, each a quarter of the request. Split by shares instead, the two copies
// would go to the same branch half the time.
func TestParallelBranchesGetEveryItemOnce(t *testing.T) {
	spec, err := os.ReadFile("../../pkg/hop/testdata/parallel.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := newRigWith(t, string(spec))
	for _, a := range [][3]string{{"img", "img", "i"}, {"det", "det", "d"}, {"cap", "cap", "c"}, {"cls", "cls", "k"}} {
		w := r.startWorker(a[0])
		r.assignTask(a[0], a[1], a[2], 4)
		r.waitServingTask(w, a[1], a[2])
	}
	const requests = 20
	for i := range requests {
		m := nats.NewMsg(wire.TaskSubject(r.spec.Name, "img", "i"))
		m.Header.Set(wire.HeaderRequestID, fmt.Sprint("req-", i))
		m.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(time.Now().Add(time.Minute)))
		m.Header.Set(wire.HeaderReplyTo, r.reply)
		m.Data, _ = msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: wire.RootItemID, Den: 1}}})
		if _, err := r.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	// per request: leaves per task (the last hop of the leaf's path), and the leaf ids seen
	leaves := map[string]map[string]int{}
	seen := map[string]bool{}
	for n := 0; n < requests*4; {
		rm := r.next(10 * time.Second)
		for _, it := range rm.Items {
			key := rm.RequestID + " " + it.ID
			if it.Status != wire.ItemOK || it.Den != 4 || seen[key] {
				t.Fatalf("request %s leaf %+v: want each leaf once, ok, weight 1/4", rm.RequestID, it)
			}
			seen[key] = true
			k, err := wire.ParseVariantKey(it.Path[len(it.Path)-1])
			if err != nil {
				t.Fatal(err)
			}
			if leaves[rm.RequestID] == nil {
				leaves[rm.RequestID] = map[string]int{}
			}
			leaves[rm.RequestID][k.Task]++
			n++
		}
	}
	for req, got := range leaves {
		if got["det"] != 1 || got["cap"] != 1 || got["cls"] != 2 {
			t.Errorf("%s: leaves per task %v, want det 1, cap 1, cls 2", req, got)
		}
	}
	if len(leaves) != requests {
		t.Errorf("%d requests answered, want %d", len(leaves), requests)
	}
}
