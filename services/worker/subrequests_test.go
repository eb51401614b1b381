package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestHeartbeatCountsSubRequests: the heartbeat counts a variant's items by the sub-requests each emitted (the plan
// check's fan-out distribution): the fan detector's 3 frames of 24 objects each are 3 items in bucket 24; the
// classifier, a leaf, counts none.
func TestHeartbeatCountsSubRequests(t *testing.T) {
	r := newFanRig(t)
	det := r.startReporting("det")
	r.assignTask("det", "det", "d", 1)
	cls := r.startReporting("cls")
	r.assignTask("cls", "cls", "c", 8)
	r.waitServingTask(det, "det", "d")
	r.waitServingTask(cls, "cls", "c")
	for i := range 3 {
		publishFrame(r, fmt.Sprint("frame-", i))
	}
	testrig.Eventually(t, 10*time.Second, "the detector's heartbeat with its 3 frames", func() bool {
		return r.heartbeat("det").Observed[r.spec.Name+":det/d"].Items == 3
	})
	got := r.heartbeat("det").Observed[r.spec.Name+":det/d"].SubRequests
	if len(got) != 25 || got[24] != 3 {
		t.Errorf("detector's histogram %v, want 3 items in bucket 24", got)
	}
	testrig.Eventually(t, 10*time.Second, "the classifier's heartbeat with its 72 objects", func() bool {
		return r.heartbeat("cls").Observed[r.spec.Name+":cls/c"].Items == 72
	})
	if got := r.heartbeat("cls").Observed[r.spec.Name+":cls/c"].SubRequests; got != nil {
		t.Errorf("the leaf classifier's histogram %v, want none", got)
	}
}

// startReporting starts worker id heartbeating (and fetching) every 100 ms, for tests that read its heartbeat.
func (r *rig) startReporting(id string) *Worker {
	return r.startWorkerWith(Config{ID: id, FetchWait: 100 * time.Millisecond, RegisterEvery: 100 * time.Millisecond})
}

// heartbeat is worker id's registration as the bucket holds it (empty when there is none).
func (r *rig) heartbeat(id string) wire.Registration {
	var reg wire.Registration
	if e, err := r.kv.Get(context.Background(), wire.WorkerKey(id)); err == nil {
		json.Unmarshal(e.Value(), &reg)
	}
	return reg
}
