package up

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// oneSlowTask: one replica of a 20 ms variant (50 items/s) on a cluster of 4 workers; with an SLO of 500 ms its
// budget is stretched to 500 ms, so the tuner lends workers once more than 25 items wait beyond the one in service.
const oneSlowTask = `
name: burst
slo_ms: 500
comm_latency_ms: 0
tasks:
  - name: a
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, profile: [{batch: 1, p50_ms: 20, p95_ms: 20}]}
allocation:
  - {task: a, variant: x, replicas: 1, max_batch: 1}
`

// TestTunerLendsIdleWorkersToABurst: a burst of 200 requests at once queues at the one replica of the static plan
// (which never changes: the planner solves nothing). Within a look or two the planner's tuner lends the 3 idle
// workers to the variant, under the same plan epoch; every request is answered once; when the queue is gone the
// loans end and the workers are idle again. With the tuner off (TestTunerOff) the burst is served by one worker.
func TestTunerLendsIdleWorkersToABurst(t *testing.T) {
	if served := burstServers(t, 0); served < 3 {
		t.Fatalf("at most %d workers served the burst; the tuner should have lent the 3 idle ones", served)
	}
}

func TestTunerOff(t *testing.T) {
	if served := burstServers(t, -1); served != 1 {
		t.Fatalf("%d workers served the burst with the tuner off, want the plan's 1", served)
	}
}

// burstServers sends the burst to a system whose tuner looks every tuneEvery (0: the default; negative: never)
// and returns the most workers that served the variant at once; it checks every request got one reply and, with
// the tuner on, that the loans end.
func burstServers(t *testing.T, tuneEvery time.Duration) int {
	file := filepath.Join(t.TempDir(), "burst.yaml")
	if err := os.WriteFile(file, []byte(oneSlowTask), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Workers: 4}
	cfg.Planner.TuneEvery = tuneEvery
	sys, spec := startSystemWith(t, file, cfg)
	serving := func() int {
		n := 0
		for _, w := range sys.Workers {
			if w.Serving() != "" {
				n++
			}
		}
		return n
	}
	c := newClient(t, sys)
	hdr := nats.Header{}
	hdr.Set(wire.HeaderTimeout, "10s")
	var subjects []string
	for range 200 {
		subjects = append(subjects, c.Send(t, spec.Name, inputRequest(t), hdr))
	}
	most := 0
	stop := time.Now().Add(2 * time.Second)
	for time.Now().Before(stop) {
		most = max(most, serving())
		time.Sleep(20 * time.Millisecond)
	}
	for s, msgs := range c.Wait(t, subjects, 15*time.Second) {
		if len(msgs) != 1 {
			t.Fatalf("request %s got %d replies", s, len(msgs))
		}
	}
	if tuneEvery >= 0 {
		testrig.Eventually(t, 10*time.Second, "the loans end after the burst", func() bool { return serving() == 1 })
	}
	return most
}
