package bus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// cluster starts three clustered nats-server processes and connects to all of them, as the services do.
func cluster(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	if _, err := natsproc.Binary(); err != nil {
		t.Skip(err)
	}
	servers, err := natsproc.StartCluster("bus", 3, t.TempDir(), natsproc.Config{Monitor: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range servers {
			s.Stop()
		}
	})
	if err := natsproc.WaitHealthy(servers, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	nc, err := Connect(natsproc.URLs(servers), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func streamReplicas(t *testing.T, js jetstream.JetStream, name string) int {
	t.Helper()
	s, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s.CachedInfo().Config.Replicas
}

// TestReplicasOnACluster, against three real nats-server processes: by default the task stream, the KV bucket and
// the variant consumers (which follow their stream) have three copies; a stream or bucket with fewer is raised;
// one an operator gave more than the planner is configured for keeps them (the planner used to shrink an R3
// stream made by hand back to R1).
func TestReplicasOnACluster(t *testing.T) {
	nc, js := cluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if got := ClusterSize(nc); got != 3 {
		t.Errorf("ClusterSize %d, want 3", got)
	}
	if got := DefaultReplicas(nc); got != 3 {
		t.Errorf("DefaultReplicas %d, want 3", got)
	}

	if _, err := EnsureTaskStream(ctx, js, "p", jetstream.FileStorage, 0); err != nil {
		t.Fatal(err)
	}
	if got := streamReplicas(t, js, wire.TaskStream("p")); got != 3 {
		t.Errorf("task stream by default: R%d, want R3", got)
	}
	c, err := EnsureVariantConsumer(ctx, js, "p", "a", "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	if ci := c.CachedInfo(); ci.Cluster == nil || len(ci.Cluster.Replicas) != 2 {
		t.Errorf("variant consumer: cluster %+v, want a leader and 2 replicas", ci.Cluster)
	}
	kv, err := OpenBucket(ctx, js, jetstream.FileStorage, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := streamReplicas(t, js, wire.KVStream); got != 3 {
		t.Errorf("KV bucket by default: R%d, want R3", got)
	}

	// An operator's R3, and a planner told R1: the stream and the bucket keep three.
	if _, err := EnsureTaskStream(ctx, js, "p", jetstream.FileStorage, 1); err != nil {
		t.Fatal(err)
	}
	if got := streamReplicas(t, js, wire.TaskStream("p")); got != 3 {
		t.Errorf("an R3 task stream ensured with replicas 1: R%d, want R3 kept", got)
	}
	if _, err := OpenBucket(ctx, js, jetstream.FileStorage, 1); err != nil {
		t.Fatal(err)
	}
	if got := streamReplicas(t, js, wire.KVStream); got != 3 {
		t.Errorf("an R3 bucket opened with replicas 1: R%d, want R3 kept", got)
	}

	// R1 state made before (a single server's, or by hand) is raised to the configured three, consumers with it.
	if _, err := EnsureTaskStream(ctx, js, "q", jetstream.FileStorage, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureVariantConsumer(ctx, js, "q", "a", "x", 0); err != nil {
		t.Fatal(err)
	}
	if got := streamReplicas(t, js, wire.TaskStream("q")); got != 1 {
		t.Fatalf("task stream made with replicas 1: R%d", got)
	}
	if _, err := EnsureTaskStream(ctx, js, "q", jetstream.FileStorage, 0); err != nil {
		t.Fatal(err)
	}
	if got := streamReplicas(t, js, wire.TaskStream("q")); got != 3 {
		t.Errorf("an R1 task stream ensured by default: R%d, want R3", got)
	}
	waitConsumerReplicas(t, js, "q", wire.Consumer("a", "x"), 2)
	if err := js.DeleteKeyValue(ctx, kv.Bucket()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: wire.Bucket, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBucket(ctx, js, jetstream.FileStorage, 0); err != nil {
		t.Fatal(err)
	}
	if got := streamReplicas(t, js, wire.KVStream); got != 3 {
		t.Errorf("an R1 bucket opened by default: R%d, want R3", got)
	}
}

// waitConsumerReplicas waits until a consumer has a leader and `followers` other peers: a raised stream scales its
// consumers once it has scaled itself (about 10 s, seen with nats-server 2.15.2).
func waitConsumerReplicas(t *testing.T, js jetstream.JetStream, pipeline, consumer string, followers int) {
	t.Helper()
	var last *jetstream.ClusterInfo
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		c, err := js.Consumer(t.Context(), wire.TaskStream(pipeline), consumer)
		if err != nil {
			continue
		}
		if last = c.CachedInfo().Cluster; last != nil && last.Leader != "" && len(last.Replicas) == followers {
			return
		}
	}
	t.Errorf("consumer %s of %s: cluster %+v, want a leader and %d replicas", consumer, pipeline, last, followers)
}

// TestReplicasAlone: a server without a cluster keeps one copy, by default.
func TestReplicasAlone(t *testing.T) {
	_, js := inProcess(t)
	if got := DefaultReplicas(js.Conn()); got != 1 {
		t.Errorf("DefaultReplicas alone %d, want 1", got)
	}
	if _, err := EnsureTaskStream(t.Context(), js, "p", jetstream.MemoryStorage, 0); err != nil {
		t.Fatal(err)
	}
	if got := streamReplicas(t, js, wire.TaskStream("p")); got != 1 {
		t.Errorf("task stream alone: R%d, want R1", got)
	}
}
