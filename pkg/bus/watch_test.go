package bus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestWatchKVLostConsumer deletes a watch's consumer under it, as a cluster node's stop does to the consumers it
// hosts while the client stays connected to another node: the watch is silent, and nats.go would recreate it only
// after two missed idle heartbeats (10 to 20 s). WatchKV's probe finds the revision it has not delivered and watches
// again: what was written after is delivered, within a few probes, once.
func TestWatchKVLostConsumer(t *testing.T) {
	_, js := inProcess(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := OpenBucket(ctx, js, jetstream.MemoryStorage, 0)
	if err != nil {
		t.Fatal(err)
	}
	kv.Put(ctx, "k.a", []byte("1"))
	r := &recorder{}
	ready := make(chan struct{})
	go WatchKV(ctx, js.Conn(), kv, "k.*", r.fn, func() { close(ready) })
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("ready was not called")
	}
	stream, err := js.Stream(ctx, wire.KVStream)
	if err != nil {
		t.Fatal(err)
	}
	var consumers []string
	for name := range stream.ConsumerNames(ctx).Name() {
		consumers = append(consumers, name)
	}
	if len(consumers) != 1 {
		t.Fatalf("consumers of the bucket: %v, want the watch's alone", consumers)
	}
	if err := stream.DeleteConsumer(ctx, consumers[0]); err != nil {
		t.Fatal(err)
	}
	kv.Put(ctx, "other", []byte("x")) // not a key of the watch: no reason to watch again
	start := time.Now()
	kv.Put(ctx, "k.b", []byte("2"))
	got := r.wait(t, 2)
	took := time.Since(start)
	if want := "[KeyValuePutOp k.a=1 KeyValuePutOp k.b=2]"; fmt.Sprint(got) != want {
		t.Errorf("watch delivered %v, want %s", got, want)
	}
	// Without the probe, 10 s or more; with it, two to three probes.
	if took > 6*watchProbe {
		t.Errorf("the entry written after the consumer's loss came %v later, want within %v", took, 6*watchProbe)
	}
	t.Logf("delivered %v after the consumer's loss", took.Round(time.Millisecond))
}

// TestLastRevision: the newest revision of the keys a pattern matches, deletes included; 0 when none matches.
func TestLastRevision(t *testing.T) {
	_, js := inProcess(t)
	ctx := context.Background()
	kv, err := OpenBucket(ctx, js, jetstream.MemoryStorage, 0)
	if err != nil {
		t.Fatal(err)
	}
	nc := js.Conn()
	if rev, err := LastRevision(ctx, nc, "k.*"); err != nil || rev != 0 {
		t.Fatalf("empty bucket: %d, %v; want 0", rev, err)
	}
	a, _ := kv.Put(ctx, "k.a", []byte("1"))
	kv.Put(ctx, "other", []byte("x"))
	if rev, err := LastRevision(ctx, nc, "k.*"); err != nil || rev != a {
		t.Fatalf("after k.a: %d, %v; want %d", rev, err, a)
	}
	if err := kv.Delete(ctx, "k.a"); err != nil {
		t.Fatal(err)
	}
	if rev, err := LastRevision(ctx, nc, "k.*"); err != nil || rev <= a {
		t.Fatalf("after the delete: %d, %v; want above %d", rev, err, a)
	}
	if rev, err := LastRevision(ctx, nc, "other"); err != nil || rev != a+1 {
		t.Fatalf("other: %d, %v; want %d", rev, err, a+1)
	}
}
