package up

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
)

// TestFirstRequestsOnAFullCluster: two pipelines (loki, the joint division) on 4 workers, too few for a replica of
// each one's every task (ocr-chain's 2, traffic's 3): the first division hosts ocr-chain and gives traffic no server.
// Traffic's first requests, sent as soon as the system is up, are refused at once (overloaded, naming the task it has
// no server for) and reported as demand, which gives it servers: then they are served. None waits out its deadline
// (the plan in force routed them to a detector whose workers had gone to the other pipeline, and they were answered
// late). The refusals' latency is logged; docs/several-pipelines.md has the figures of the real binaries.
func TestFirstRequestsOnAFullCluster(t *testing.T) {
	var specs []*pipeline.Spec
	for _, file := range []string{"../../examples/ocr-chain.yaml", "../../examples/traffic.yaml"} {
		spec, err := pipeline.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, spec)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sys, err := Start(ctx, Config{Workers: 4, DataDir: t.TempDir(), Pipelines: specs, MaxPayload: 8 << 20,
		Planner: planner.Config{Storage: jetstream.MemoryStorage}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := sys.Wait(); err != nil {
			t.Errorf("system stopped with: %v", err)
		}
	})
	if !sys.Up(ctx) {
		t.Fatal("not up")
	}
	c := newClient(t, sys)
	var sent []string
	const qps, length = 10, 6 * time.Second
	start := time.Now()
	for i := 0; time.Since(start) < length; i++ {
		sent = append(sent, c.Send(t, "traffic", inputRequest(t), nil))
		time.Sleep(time.Until(start.Add(time.Duration(i+1) * time.Second / qps)))
	}
	replies := c.Wait(t, sent, 10*time.Second)
	ok, refused, servedAfter := 0, 0, -1
	var slowest time.Duration
	for i, subj := range sent {
		switch rep := decodeReply(t, replies[subj][0]); rep.Status {
		case wire.StatusOK:
			ok++
			if servedAfter < 0 {
				servedAfter = i
			}
		case wire.StatusOverloaded:
			refused++
			if !strings.Contains(rep.Error, "no server for task detect") {
				t.Errorf("request %d refused: %q, want the reason: no server for task detect", i, rep.Error)
			}
			slowest = max(slowest, c.Latency(subj))
		default:
			t.Errorf("request %d: %s %q after %v, want ok or refused at once", i, rep.Status, rep.Error, c.Latency(subj))
		}
	}
	t.Logf("%d requests: %d refused (the slowest in %v), %d ok, the first ok the %dth", len(sent), refused, slowest,
		ok, servedAfter+1)
	if refused == 0 || ok == 0 {
		t.Errorf("%d refused, %d ok: want traffic refused while it has no server, then served", refused, ok)
	}
}
