package testrig

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DieHolding plays a worker killed mid-batch: on nc, a connection of its own, it takes the next message of a durable
// consumer and closes nc without acknowledging it, so that JetStream delivers the message again after its ack wait
// (or backoff). It returns how many times the message had been delivered, and fails the test if none came within
// wait.
func DieHolding(t testing.TB, nc *nats.Conn, stream, consumer string, wait time.Duration) uint64 {
	t.Helper()
	defer nc.Close()
	js := JetStream(t, nc)
	ctx := context.Background()
	cons, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		t.Fatalf("consumer %s of %s: %v", consumer, stream, err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		meta, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		return meta.NumDelivered
	}
	t.Fatalf("no message of consumer %s within %v", consumer, wait)
	return 0
}
