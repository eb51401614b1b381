package up

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// cascadeTask: one task served as a cascade, small then big, at threshold 0.6 (a static plan); small's emulated
// confidence sends on about a quarter of the items (pipeline.LevelAt).
const cascadeTask = `
name: casc
slo_ms: 2000
batch_sizes: [1, 4]
tasks:
  - name: classify
    variants:
      - {name: small, accuracy: 0.771, executor: {kind: emulated},
         confidence: {right: {mean: 0.8, sd: 0.15}, wrong: {mean: 0.45, sd: 0.2}},
         profile: [{batch: 1, p50_ms: 2, p95_ms: 2}, {batch: 4, p50_ms: 4, p95_ms: 4}]}
      - {name: big, accuracy: 0.843, executor: {kind: emulated},
         profile: [{batch: 1, p50_ms: 4, p95_ms: 4}, {batch: 4, p50_ms: 8, p95_ms: 8}]}
    cascade: {variants: [small, big], thresholds: [0.6], threshold: 0.6}
allocation:
  - {task: classify, variant: small, replicas: 1, max_batch: 4}
  - {task: classify, variant: big, replicas: 1, max_batch: 4}
`

// TestCascadeEscalatesLive: on real workers and JetStream, the cascade's first variant answers the items it is sure
// of and republishes the others to the next variant, which answers them: every request is answered ok, by small
// alone or by small then big; the share sent on is the level's; each reply's accuracy is the level's for its path;
// and small's heartbeat counts the items it sent on.
func TestCascadeEscalatesLive(t *testing.T) {
	file := filepath.Join(t.TempDir(), "casc.yaml")
	if err := os.WriteFile(file, []byte(cascadeTask), 0o644); err != nil {
		t.Fatal(err)
	}
	sys, spec := startSystem(t, file, 2)
	level := spec.Task("classify").Cascade.Level(0.6)
	c := newClient(t, sys)
	const n = 400
	var subjects []string
	data := inputRequest(t)
	for range n {
		subjects = append(subjects, c.Send(t, spec.Name, data, nats.Header{wire.HeaderTimeout: []string{"10s"}}))
		time.Sleep(time.Millisecond)
	}
	replies := c.Wait(t, subjects, 30*time.Second)
	kept, sent := []string{"classify/small"}, []string{"classify/small", "classify/big"}
	var escalated int
	for _, s := range subjects {
		rep := decodeReply(t, replies[s][0])
		if rep.Status != wire.StatusOK || len(rep.Results) != 1 {
			t.Fatalf("request %s: status %q (%s), %d results", s, rep.Status, rep.Error, len(rep.Results))
		}
		want := level.Accuracy
		switch path := rep.Results[0].Path; {
		case slices.Equal(path, sent):
			escalated++
			want = level.NextAccuracy
		case !slices.Equal(path, kept):
			t.Fatalf("request %s: path %v, want %v or %v", s, path, kept, sent)
		}
		if math.Abs(rep.Accuracy-want) > 1e-9 {
			t.Errorf("request %s: accuracy %v, want %v", s, rep.Accuracy, want)
		}
	}
	rate := float64(escalated) / n
	if tol := 4 * math.Sqrt(level.Escalation*(1-level.Escalation)/n); math.Abs(rate-level.Escalation) > tol {
		t.Errorf("sent on %d of %d (%.3f), the level says %.3f (+-%.3f)", escalated, n, rate, level.Escalation, tol)
	}
	var counted uint64
	for _, w := range sys.Workers {
		for key, o := range w.Observations() {
			if key == "casc:classify/small" {
				counted += o.Escalated
			}
		}
	}
	if counted != uint64(escalated) {
		t.Errorf("small's workers count %d items sent on, the replies %d", counted, escalated)
	}
}
