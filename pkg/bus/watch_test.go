package bus

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

type recorder struct {
	mu      sync.Mutex
	entries []string
	revs    map[uint64]int
	ready   int
}

func (r *recorder) fn(e jetstream.KeyValueEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, fmt.Sprintf("%s %s=%s", e.Operation(), e.Key(), e.Value()))
	if r.revs == nil {
		r.revs = map[uint64]int{}
	}
	r.revs[e.Revision()]++
}

func (r *recorder) wait(t *testing.T, n int) []string {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		got := append([]string(nil), r.entries...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(end) {
			t.Fatalf("watch delivered %v, want %d entries", got, n)
		}
	}
}

func TestWatchKV(t *testing.T) {
	_, js := inProcess(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, r := watched(ctx, t, js, jetstream.MemoryStorage)
	if _, err := OpenBucket(ctx, js, jetstream.MemoryStorage, 0); err != nil {
		t.Fatalf("opening the bucket again: %v", err)
	}
	kv.Put(ctx, "other", []byte("x"))
	kv.Put(ctx, "k.b", []byte("2"))
	kv.Delete(ctx, "k.a")
	got := r.wait(t, 3)
	want := []string{"KeyValuePutOp k.a=1", "KeyValuePutOp k.b=2", "KeyValueDeleteOp k.a="}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("watch delivered %v, want %v", got, want)
	}
}

// TestWatchSurvivesServerRestart stops the server under a watching client and starts a new one on the same port and
// store: the watch is re-established by itself and delivers what was written after, once.
func TestWatchSurvivesServerRestart(t *testing.T) {
	dir := t.TempDir()
	s1, err := StartServer(ServerConfig{StoreDir: dir, Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	url := s1.ClientURL()
	nc, err := Connect(url, "watcher")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, r := watched(ctx, t, js, jetstream.FileStorage)

	var p int
	_, portStr, _ := cut(s1.Addr().String())
	fmt.Sscanf(portStr, "%d", &p)
	s1.Shutdown()
	s1.WaitForShutdown()
	s2, err := StartServer(ServerConfig{StoreDir: dir, Port: p})
	if err != nil {
		t.Fatalf("restart on port %d: %v", p, err)
	}
	defer s2.Shutdown()

	writer, err := Connect(url, "writer")
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	wjs, _ := jetstream.New(writer)
	wkv, err := OpenBucket(ctx, wjs, jetstream.FileStorage, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wkv.Put(ctx, "k.b", []byte("2")); err != nil {
		t.Fatal(err)
	}
	got := r.wait(t, 2)
	if got[1] != "KeyValuePutOp k.b=2" {
		t.Errorf("after the restart the watch delivered %v", got)
	}
	time.Sleep(300 * time.Millisecond) // a revision delivered twice would be here by now
	r.mu.Lock()
	defer r.mu.Unlock()
	for rev, n := range r.revs {
		if n != 1 {
			t.Errorf("revision %d delivered %d times", rev, n)
		}
	}
}

// watched opens the bucket on js with k.a written, and watches k.* with WatchKV from a recorder until ctx ends; it
// returns once the watch delivered the bucket's values (ready).
func watched(ctx context.Context, t *testing.T, js jetstream.JetStream, storage jetstream.StorageType) (jetstream.KeyValue, *recorder) {
	t.Helper()
	kv, err := OpenBucket(ctx, js, storage, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k.a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	ready := make(chan struct{})
	go WatchKV(ctx, js.Conn(), kv, "k.*", r.fn, func() { close(ready) })
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("ready was not called")
	}
	return kv, r
}

// TestWatchKVLostConsumer deletes a watch's consumer under it, as a cluster node's stop does to the consumers it
// hosts while the client stays connected to another node: the watch is silent, and nats.go would recreate it only
// after two missed idle heartbeats (10 to 20 s). WatchKV's probe finds the revision it has not delivered and watches
// again: what was written after is delivered, within a few probes, once.
func TestWatchKVLostConsumer(t *testing.T) {
	_, js := inProcess(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, r := watched(ctx, t, js, jetstream.MemoryStorage)
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
