package planner

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestPlannerWaitsForJetStream: a planner started before its server's JetStream is up (as compose starts the
// planner beside a cluster still electing its meta leader) declares its state again until it can, and then plans;
// it does not exit on the first refusal.
func TestPlannerWaitsForJetStream(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("server not ready")
	}
	sp, err := pipeline.Parse([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	p, err := New(nc, Config{Pipelines: []*pipeline.Spec{sp}, Storage: jetstream.MemoryStorage, System: "static"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	select {
	case err := <-ran:
		t.Fatalf("the planner ended before JetStream was up: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := s.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testrig.Eventually(t, 10*time.Second, "the plan in the bucket", func() bool {
		kv, err := js.KeyValue(ctx, wire.Bucket)
		if err != nil {
			return false
		}
		_, err = kv.Get(ctx, wire.PlanKey(sp.Name))
		return err == nil
	})
	cancel()
	if err := <-ran; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}
