package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestHeartbeatCountsSubRequests: the heartbeat counts a variant's items by the sub-requests each emitted (the plan
// check's fan-out distribution): the fan detector's 3 frames of 24 objects each are 3 items in bucket 24; the
// classifier, a leaf, counts none.
func TestHeartbeatCountsSubRequests(t *testing.T) {
	r := newFanRig(t)
	det := r.startWorkerWith(Config{ID: "det", FetchWait: 100 * time.Millisecond, RegisterEvery: 100 * time.Millisecond})
	r.assignTask("det", "det", "d", 1)
	cls := r.startWorkerWith(Config{ID: "cls", FetchWait: 100 * time.Millisecond, RegisterEvery: 100 * time.Millisecond})
	r.assignTask("cls", "cls", "c", 8)
	r.waitServingTask(det, "det", "d")
	r.waitServingTask(cls, "cls", "c")
	for i := range 3 {
		publishFrame(r, fmt.Sprint("frame-", i))
	}
	beat := func(id string) wire.Registration {
		var reg wire.Registration
		if e, err := r.kv.Get(context.Background(), wire.WorkerKey(id)); err == nil {
			json.Unmarshal(e.Value(), &reg)
		}
		return reg
	}
	testrig.Eventually(t, 10*time.Second, "the detector's heartbeat with its 3 frames", func() bool {
		return beat("det").Observed[r.spec.Name+":det/d"].Items == 3
	})
	got := beat("det").Observed[r.spec.Name+":det/d"].SubRequests
	if len(got) != 25 || got[24] != 3 {
		t.Errorf("detector's histogram %v, want 3 items in bucket 24", got)
	}
	testrig.Eventually(t, 10*time.Second, "the classifier's heartbeat with its 72 objects", func() bool {
		return beat("cls").Observed[r.spec.Name+":cls/c"].Items == 72
	})
	if got := beat("cls").Observed[r.spec.Name+":cls/c"].SubRequests; got != nil {
		t.Errorf("the leaf classifier's histogram %v, want none", got)
	}
}
