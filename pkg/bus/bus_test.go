package bus

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func inProcess(t *testing.T) (*server.Server, jetstream.JetStream) {
	t.Helper()
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	nc, err := ConnectInProcess(s, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}

// TestStreamAndConsumers: creation is idempotent, each variant's consumer sees only its subject, and a subject no
// stream covers is refused.
func TestStreamAndConsumers(t *testing.T) {
	_, js := inProcess(t)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := EnsureTaskStream(ctx, js, "p", jetstream.MemoryStorage, 0); err != nil {
			t.Fatalf("EnsureTaskStream #%d: %v", i, err)
		}
	}
	var cons []jetstream.Consumer
	for _, v := range []string{"x", "y"} {
		for i := 0; i < 2; i++ {
			c, err := EnsureVariantConsumer(ctx, js, "p", "a", v, 0)
			if err != nil {
				t.Fatalf("EnsureVariantConsumer %s #%d: %v", v, i, err)
			}
			if i == 1 {
				cons = append(cons, c)
			}
		}
	}
	for i, v := range []string{"x", "x", "y"} {
		if _, err := js.Publish(ctx, wire.TaskSubject("p", "a", v), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []int{2, 1} {
		// The server counts a consumer's pending messages shortly after it acknowledges the publish, not before:
		// wait for the count (a busy machine made a first look see 1 of 2).
		var info *jetstream.ConsumerInfo
		for deadline := time.Now().Add(5 * time.Second); ; {
			var err error
			if info, err = cons[i].Info(ctx); err != nil {
				t.Fatal(err)
			}
			if int(info.NumPending) == want || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if int(info.NumPending) != want {
			t.Errorf("consumer %s has %d pending, want %d", info.Name, info.NumPending, want)
		}
		if info.Config.MaxAckPending != 100000 {
			t.Errorf("consumer %s MaxAckPending %d", info.Name, info.Config.MaxAckPending)
		}
	}
	if _, err := js.Publish(ctx, "sleipnir.task.other.a.x", []byte("x")); err == nil {
		t.Error("a publish to a subject no stream covers succeeded")
	}
}

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
	kv, err := OpenBucket(ctx, js, jetstream.MemoryStorage, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBucket(ctx, js, jetstream.MemoryStorage, 0); err != nil {
		t.Fatalf("opening the bucket again: %v", err)
	}
	kv.Put(ctx, "k.a", []byte("1"))
	kv.Put(ctx, "other", []byte("x"))
	r := &recorder{}
	ready := make(chan struct{})
	go WatchKV(ctx, js.Conn(), kv, "k.*", r.fn, func() { close(ready) })
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("ready was not called")
	}
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
	kv, err := OpenBucket(ctx, js, jetstream.FileStorage, 0)
	if err != nil {
		t.Fatal(err)
	}
	kv.Put(ctx, "k.a", []byte("1"))
	r := &recorder{}
	go WatchKV(ctx, nc, kv, "k.*", r.fn, nil)
	r.wait(t, 1)

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

func cut(hostport string) (string, string, bool) {
	for i := len(hostport) - 1; i >= 0; i-- {
		if hostport[i] == ':' {
			return hostport[:i], hostport[i+1:], true
		}
	}
	return hostport, "", false
}

func TestStartServerPortInUse(t *testing.T) {
	s1, err := StartServer(ServerConfig{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Shutdown()
	_, portStr, _ := cut(s1.Addr().String())
	var p int
	fmt.Sscanf(portStr, "%d", &p)
	if s2, err := StartServer(ServerConfig{StoreDir: t.TempDir(), Port: p}); err == nil {
		s2.Shutdown()
		t.Fatal("a second server started on a port in use")
	}
}

func TestHeaderCarrier(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	in := nats.Header{}
	in.Set("traceparent", tp)
	prop := propagation.TraceContext{}
	ctx := prop.Extract(context.Background(), HeaderCarrier(in))
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("extracted %v", sc)
	}
	out := nats.Header{}
	prop.Inject(ctx, HeaderCarrier(out))
	if v, ok := out["traceparent"]; !ok || v[0] != tp {
		t.Fatalf("injected %v, want lower-case traceparent %s", out, tp)
	}
}
