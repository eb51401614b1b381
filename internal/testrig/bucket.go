// The planner's bucket bound the way the other services bind it, because tests that run a planner read what it
// publishes and must not make the bucket themselves: the planner owns it and its settings.

package testrig

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
)

// bindTimeout is how long Bucket waits for the planner to make the bucket, which a planner does as it starts.
var bindTimeout = 10 * time.Second

// Bucket binds the KV bucket on nc as frontends and workers do (bus.BindBucket): it waits for the planner to make it
// and never makes it itself, so a test that runs a planner leaves the bucket's settings to the planner, their owner.
// It fails the test if there is no bucket within 10 s.
func Bucket(t testing.TB, nc *nats.Conn) jetstream.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bindTimeout)
	defer cancel()
	kv, err := bus.BindBucket(ctx, JetStream(t, nc))
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
