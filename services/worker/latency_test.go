package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestWorkerReportsBatchLatencies: the worker times each model batch it runs, and its heartbeat carries, per
// variant and batch size, the count and p50/p95 of the recent window: here 25 batches of one item of an emulated
// variant profiled at 30 ms.
func TestWorkerReportsBatchLatencies(t *testing.T) {
	r := newRig(t)
	w := r.startReporting("w1")
	r.assign("w1", "slow")
	r.waitServing(w, "slow")
	const n = 25
	for i := range n {
		r.publish("slow", fmt.Sprintf("r%d", i), time.Now().Add(time.Minute), nil, nil)
	}
	for range n {
		r.next(10 * time.Second)
	}
	var reg wire.Registration
	err := testrig.WaitFor(5*time.Second, "a heartbeat with the batches", func() bool {
		reg = r.heartbeat("w1")
		l := reg.Observed["one:a/slow"].Latency
		return len(l) == 1 && l[0].Count == n
	})
	if err != nil {
		t.Fatalf("%v: %+v", err, reg.Observed)
	}
	l := reg.Observed["one:a/slow"].Latency[0]
	if l.Batch != 1 || l.P50Ms < 25 || l.P50Ms > 100 || l.P95Ms < l.P50Ms || l.P95Ms > 200 {
		t.Fatalf("latency %+v: want batch 1, p50 about 30 ms, p95 at or above it", l)
	}
}
