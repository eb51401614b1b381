package up

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// slowLeaf: a fast first task and a slow leaf task (400 ms batches) with one replica each; the test runs a spare
// worker too.
const slowLeaf = `
name: kill
slo_ms: 20000
tasks:
  - name: a
    children: [b]
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1, distribution: fixed},
         profile: [{batch: 1, p50_ms: 5, p95_ms: 5}, {batch: 4, p50_ms: 5, p95_ms: 5}]}
  - name: b
    variants:
      - {name: slow, accuracy: 0.9, executor: {kind: emulated},
         profile: [{batch: 1, p50_ms: 400, p95_ms: 400}, {batch: 4, p50_ms: 400, p95_ms: 400}]}
batch_sizes: [1, 4]
allocation:
  - {task: a, variant: x, replicas: 1, max_batch: 4}
  - {task: b, variant: slow, replicas: 1, max_batch: 4}
`

// TestKilledWorkerLosesNothing kills the worker of b/slow in the middle of a batch. Its unacknowledged messages go,
// after the ack wait, to the spare worker the planner assigns in its place, and every request gets exactly one
// complete reply.
func TestKilledWorkerLosesNothing(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kill.yaml")
	if err := os.WriteFile(file, []byte(slowLeaf), 0o644); err != nil {
		t.Fatal(err)
	}
	sys, spec := startSystemWith(t, file, Config{Workers: 3})
	c := newClient(t, sys)
	hdr := nats.Header{}
	hdr.Set(wire.HeaderTimeout, "20s")
	var subjects []string
	for i := 0; i < 6; i++ {
		subjects = append(subjects, c.Send(t, spec.Name, inputRequest(t), hdr))
	}
	// Find the worker of b/slow once it holds a batch, and kill it.
	victim := -1
	testrig.Eventually(t, 5*time.Second, "a worker of b/slow takes a batch", func() bool {
		for i, w := range sys.Workers {
			if strings.HasSuffix(w.Serving(), ":b/slow") && w.Stats().Messages > 0 {
				victim = i
			}
		}
		return victim >= 0
	})
	sys.KillWorker(victim)
	killed := time.Now()

	replies := c.Wait(t, subjects, 20*time.Second)
	t.Logf("every reply within %v of the kill", time.Since(killed).Round(time.Millisecond))
	c.ExpectOneReply(t, subjects, 200*time.Millisecond)
	for _, s := range subjects {
		rep := decodeReply(t, replies[s][0])
		if rep.Status != wire.StatusOK || len(rep.Results) != 1 {
			t.Errorf("%s: status %s with %d leaves (%s), want ok with 1", s, rep.Status, len(rep.Results), rep.Error)
		}
	}
	var redone uint64
	for i, w := range sys.Workers {
		if i != victim && strings.HasSuffix(w.Serving(), ":b/slow") {
			redone = w.Stats().Items
		}
	}
	if redone == 0 {
		t.Error("no other worker executed b/slow after the kill")
	}
}
