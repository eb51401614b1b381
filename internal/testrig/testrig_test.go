package testrig

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// failureTB records the failures of the helper under test instead of failing the test, so that the rig's tests can
// check that a helper fails when it must. Fatal ends the helper's goroutine, as testing's does.
type failureTB struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (f *failureTB) Helper() {}

func (f *failureTB) record(msg string) {
	f.mu.Lock()
	f.failed = append(f.failed, msg)
	f.mu.Unlock()
}

func (f *failureTB) Error(args ...any)                 { f.record(fmt.Sprint(args...)) }
func (f *failureTB) Errorf(format string, args ...any) { f.record(fmt.Sprintf(format, args...)) }
func (f *failureTB) Fatal(args ...any)                 { f.record(fmt.Sprint(args...)); runtime.Goexit() }
func (f *failureTB) Fatalf(format string, args ...any) {
	f.record(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (f *failureTB) failures() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.failed...)
}

// failures runs fn in a goroutine of its own with a failureTB and returns what it failed with.
func failures(t *testing.T, fn func(tb testing.TB)) []string {
	f := &failureTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); fn(f) }()
	<-done
	return f.failures()
}

// after is a condition that starts to hold d from now.
func after(d time.Duration) func() bool {
	at := time.Now().Add(d)
	return func() bool { return time.Now().After(at) }
}

// TestWaits: a wait returns once its condition holds, and otherwise fails saying what it awaited; Consistently
// fails as soon as its condition stops holding, and otherwise lasts its whole duration.
func TestWaits(t *testing.T) {
	if err := WaitFor(10*time.Second, "the condition", after(50*time.Millisecond)); err != nil {
		t.Errorf("WaitFor of a condition that comes to hold: %v", err)
	}
	err := WaitFor(50*time.Millisecond, "worker w1 serves", func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "worker w1 serves") {
		t.Errorf("WaitFor of a condition that never holds: %v, want an error saying what was awaited", err)
	}
	if f := failures(t, func(tb testing.TB) { Eventually(tb, 10*time.Second, "x", after(50*time.Millisecond)) }); len(f) > 0 {
		t.Errorf("Eventually of a condition that comes to hold failed: %v", f)
	}
	f := failures(t, func(tb testing.TB) { Eventually(tb, 50*time.Millisecond, "the plan", func() bool { return false }) })
	if len(f) != 1 || !strings.Contains(f[0], "the plan") {
		t.Errorf("Eventually of a condition that never holds failed with %v, want once, saying what was awaited", f)
	}

	start := time.Now()
	if f := failures(t, func(tb testing.TB) { Consistently(tb, 100*time.Millisecond, "x", func() bool { return true }) }); len(f) > 0 {
		t.Errorf("Consistently of a condition that holds failed: %v", f)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("Consistently returned after %v, before its 100 ms", took)
	}
	start = time.Now()
	broken := after(50 * time.Millisecond)
	f = failures(t, func(tb testing.TB) {
		Consistently(tb, time.Minute, "serving a/x", func() bool { return !broken() })
	})
	if len(f) != 1 || !strings.Contains(f[0], "serving a/x") {
		t.Errorf("Consistently of a condition that stops holding failed with %v, want once, saying what", f)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Consistently failed after %v, not when its condition stopped holding", took)
	}
}

// TestServerAndConnections: the embedded server serves JetStream to in-process connections and, with Listen, to
// connections by URL; when the test ends the connections are closed and the server is shut down.
func TestServerAndConnections(t *testing.T) {
	var srv *Embedded
	var conns []*nats.Conn
	t.Run("test", func(t *testing.T) {
		srv = Server(t, Listen())
		conns = []*nats.Conn{srv.Connect(t, "in-process"), Connect(t, srv.URL(), "by-url")}
		sub, err := conns[0].SubscribeSync("hello")
		if err != nil {
			t.Fatal(err)
		}
		conns[0].Flush()
		if err := conns[1].Publish("hello", []byte("world")); err != nil {
			t.Fatal(err)
		}
		if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "world" {
			t.Fatalf("message %v, %v", m, err)
		}
		if _, err := JetStream(t, conns[1]).AccountInfo(context.Background()); err != nil {
			t.Errorf("no JetStream: %v", err)
		}
	})
	for _, nc := range conns {
		if !nc.IsClosed() {
			t.Errorf("connection %s open after its test", nc.Opts.Name)
		}
	}
	if srv == nil || srv.Running() {
		t.Error("the server runs on after its test")
	}
}

// TestBucketOnlyBinds: Bucket returns the bucket the planner made (bus.OpenBucket) and, where there is none, fails
// without making one.
func TestBucketOnlyBinds(t *testing.T) {
	defer func(d time.Duration) { bindTimeout = d }(bindTimeout)
	bindTimeout = 300 * time.Millisecond
	s := Server(t)
	nc := s.Connect(t, "test")
	if f := failures(t, func(tb testing.TB) { Bucket(tb, nc) }); len(f) != 1 {
		t.Errorf("Bucket without a bucket failed with %v, want once", f)
	}
	js := JetStream(t, nc)
	if _, err := js.KeyValue(context.Background(), wire.Bucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("after Bucket gave up, the lookup says %v: Bucket made the bucket", err)
	}
	made, err := bus.OpenBucket(context.Background(), js, jetstream.MemoryStorage, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := made.Put(context.Background(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if e, err := Bucket(t, s.Connect(t, "reader")).Get(context.Background(), "k"); err != nil || string(e.Value()) != "v" {
		t.Errorf("Bucket's bucket holds %v, %v, want the planner's", e, err)
	}
}

// TestRun: stop returns once the service has returned; an error the service stops with by itself fails the test,
// one after stop does not; at the test's end every service is told to stop at once, not one after another.
func TestRun(t *testing.T) {
	var together bool
	t.Run("end", func(t *testing.T) {
		firstStopped := make(chan struct{})
		Run(t, "first", func(ctx context.Context) error { <-ctx.Done(); close(firstStopped); return nil })
		// Stopped first (cleanups run last in, first out): it returns once the first was told to stop as well.
		Run(t, "second", func(ctx context.Context) error {
			<-ctx.Done()
			select {
			case <-firstStopped:
				together = true
			case <-time.After(5 * time.Second):
			}
			return nil
		})
	})
	if !together {
		t.Error("at the test's end the services were stopped one after another")
	}

	var returned bool
	stop := Run(t, "svc", func(ctx context.Context) error {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a service that takes a moment to stop
		returned = true
		return errors.New("stopped late")
	})
	stop()
	if !returned {
		t.Error("stop returned before the service")
	}
	stop() // again: nothing

	tb := &failureTB{TB: t}
	Run(tb, "worker w1", func(context.Context) error { return errors.New("NATS connection closed") })
	Eventually(t, 5*time.Second, "the service's error recorded", func() bool { return len(tb.failures()) > 0 })
	if f := tb.failures(); len(f) != 1 || !strings.Contains(f[0], "worker w1") || !strings.Contains(f[0], "NATS connection closed") {
		t.Errorf("a service that stopped with an error failed the test with %v, want once, naming it", f)
	}
}

// TestExpectOneReply: a request answered twice fails ExpectOneReply, also when the second reply comes after Wait
// returned (the map Wait returns does not have it); requests answered once pass it.
func TestExpectOneReply(t *testing.T) {
	s := Server(t)
	responder := s.Connect(t, "responder")
	if _, err := responder.Subscribe(wire.InferSubject("p"), func(m *nats.Msg) {
		m.Respond([]byte("first"))
		if string(m.Data) == "twice" {
			time.AfterFunc(300*time.Millisecond, func() { m.Respond([]byte("second")) })
		}
	}); err != nil {
		t.Fatal(err)
	}
	responder.Flush()
	c := NewClient(t, s.Connect(t, "client"))
	once := []string{c.Send(t, "p", []byte("once"), nil), c.Send(t, "p", []byte("once"), nil)}
	c.Wait(t, once, 5*time.Second)
	if f := failures(t, func(tb testing.TB) { c.ExpectOneReply(tb, once, 200*time.Millisecond) }); len(f) > 0 {
		t.Errorf("requests answered once failed: %v", f)
	}
	twice := c.Send(t, "p", []byte("twice"), nil)
	if got := c.Wait(t, []string{twice}, 5*time.Second)[twice]; len(got) != 1 {
		t.Fatalf("Wait returned %d replies, want the first alone (the second comes 300 ms later)", len(got))
	}
	f := failures(t, func(tb testing.TB) { c.ExpectOneReply(tb, append(once, twice), 5*time.Second) })
	if len(f) != 1 || !strings.Contains(f[0], twice) {
		t.Errorf("a request answered twice failed with %v, want once, naming it", f)
	}
}
