package bus

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func taskMsg(id string) *nats.Msg {
	m := nats.NewMsg(wire.TaskSubject("p", "a", "x"))
	m.Data = []byte("task")
	wire.TaskHeaders{RequestID: id, Deadline: time.Now().Add(time.Minute), ReplyTo: wire.ResultSubject("fe"),
		MsgID: wire.TaskMsgID(id, "", "a", "x")}.Write(m.Header.Set)
	return m
}

// TestPublishAsyncWaitsForTheStream: a message sent while no server answers for its subject (no stream yet, as while
// a stream has no leader) is sent again until the stream takes it, once; the caller's turn passes after the first
// send.
func TestPublishAsyncWaitsForTheStream(t *testing.T) {
	_, js := inProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var sent atomic.Int32
	firstSent := make(chan struct{})
	created := make(chan time.Time, 1)
	go func() {
		defer close(created)
		<-firstSent
		time.Sleep(300 * time.Millisecond)
		if _, err := EnsureTaskStream(context.Background(), js, "p", jetstream.MemoryStorage, 0); err != nil {
			t.Error(err)
			return
		}
		created <- time.Now()
	}()
	defer func() { <-created }()
	ack, err := PublishAsync(ctx, js, taskMsg("fe-1"), func() {
		if sent.Add(1) == 1 {
			close(firstSent)
		}
	})
	if err != nil {
		t.Fatalf("publish: %v, want it taken once the stream exists", err)
	}
	if ack.Stream != wire.TaskStream("p") || ack.Duplicate {
		t.Errorf("ack %+v, want a first copy in %s", ack, wire.TaskStream("p"))
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("sent called %d times, want once", n)
	}
	// Taken within the backoff's longest wait of the stream's creation.
	if at, ok := <-created; ok && time.Since(at) > time.Second {
		t.Errorf("taken %v after the stream was created", time.Since(at))
	}
	st, err := js.Stream(ctx, wire.TaskStream("p"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Errorf("stream holds %v messages (%v), want 1", info.State.Msgs, err)
	}
}

// TestPublishAsyncGivesUpBeforeTheDeadline: with no stream ever, the sends go on while the deadline allows another,
// and the error says why before the deadline (not the deadline's error); any other error comes at once.
func TestPublishAsyncGivesUpBeforeTheDeadline(t *testing.T) {
	_, js := inProcess(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := PublishAsync(ctx, js, taskMsg("fe-1"), nil)
	took := time.Since(start)
	if !errors.Is(err, jetstream.ErrNoStreamResponse) || !strings.Contains(err.Error(), "sends over") {
		t.Fatalf("error %v, want no response from stream after several sends", err)
	}
	if took < time.Second || took > 2*time.Second {
		t.Errorf("gave up after %v, want within the last 250 ms before the 2 s deadline", took)
	}

	if _, err := EnsureTaskStream(context.Background(), js, "p", jetstream.MemoryStorage, 0); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = PublishAsync(ctx, js, taskMsg("fe-2"), nil, jetstream.WithExpectStream("other"))
	if err == nil || errors.Is(err, jetstream.ErrNoStreamResponse) || time.Since(start) > 2*time.Second {
		t.Errorf("publish expecting another stream: %v after %v, want its error at once", err, time.Since(start))
	}
}

// TestPublishAsyncAfterALostConnection: a message whose acknowledgement was outstanding when the connection was lost
// is sent again once it is back, and a duplicate acknowledgement then (an earlier send was stored) counts as the
// message taken.
func TestPublishAsyncAfterALostConnection(t *testing.T) {
	s, js := inProcess(t)
	nc := js.Conn()
	// A subscriber that never answers holds the acknowledgement outstanding, as a stream on a node that dies would.
	silent, err := nc.Subscribe(wire.TaskSubject("p", "a", "x"), func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	other, err := ConnectInProcess(s, "other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ojs, _ := jetstream.New(other)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := taskMsg("fe-1")
	done := make(chan struct{})
	var ack *jetstream.PubAck
	var pubErr error
	go func() {
		defer close(done)
		ack, pubErr = PublishAsync(ctx, js, msg, nil)
	}()
	// The earlier send stored: a copy with the same message id is in the stream when the connection drops.
	time.Sleep(200 * time.Millisecond)
	if _, err := EnsureTaskStream(ctx, ojs, "p", jetstream.MemoryStorage, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ojs.PublishMsg(ctx, taskMsg("fe-1")); err != nil {
		t.Fatal(err)
	}
	if err := silent.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	<-done
	if pubErr != nil || ack.Stream != wire.TaskStream("p") || ack.Duplicate {
		t.Fatalf("publish: %+v, %v; want the earlier copy's acknowledgement, not a duplicate", ack, pubErr)
	}
	st, _ := ojs.Stream(ctx, wire.TaskStream("p"))
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Errorf("stream holds %v messages (%v), want 1", info.State.Msgs, err)
	}
}
