package worker

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// answers gathers the rig's result messages by request id.
type answers struct {
	mu   sync.Mutex
	byID map[string][]wire.ResultMessage
}

func (r *rig) collect(t *testing.T) *answers {
	a := &answers{byID: map[string][]wire.ResultMessage{}}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case rm := <-r.results:
				a.mu.Lock()
				a.byID[rm.RequestID] = append(a.byID[rm.RequestID], rm)
				a.mu.Unlock()
			case <-done:
				return
			}
		}
	}()
	return a
}

func (a *answers) of(id string) []wire.ResultMessage {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]wire.ResultMessage(nil), a.byID[id]...)
}

// deadLetters reads every message of the dead-letter stream.
func (r *rig) deadLetters(t *testing.T) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := r.js.Stream(ctx, wire.DeadLetterStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestWorkerSetsAsideGarbage puts messages that are not task messages on a variant subject: each is set aside at
// once in the dead-letter stream, with its headers, payload and the reason; its request is answered error when its
// headers say where; it is counted; and the worker goes on serving.
func TestWorkerSetsAsideGarbage(t *testing.T) {
	r := newRig(t)
	got := r.collect(t)
	w := r.startWorker("w1")
	r.assign("w1", "fast")
	r.waitServing(w, "fast")
	soon := time.Now().Add(time.Minute)
	valid := func(id string) nats.Header {
		h := nats.Header{}
		h.Set(wire.HeaderRequestID, id)
		h.Set(wire.HeaderDeadline, wire.FormatDeadline(soon))
		h.Set(wire.HeaderReplyTo, r.reply)
		return h
	}
	without := func(id, key string) nats.Header { h := valid(id); h.Del(key); return h }
	with := func(id, key, v string) nats.Header { h := valid(id); h.Set(key, v); return h }
	emptyItems, _ := msgpack.Marshal(&wire.TaskMessage{})
	noWeight, _ := msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: "0"}}})
	one, _ := msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: "0", Den: 1}}})
	garbage := []struct {
		id       string
		hdr      nats.Header
		data     []byte
		answered bool // its request id and result subject are readable
	}{
		{"not-msgpack", valid("not-msgpack"), []byte("hello"), true},
		{"no-items", valid("no-items"), emptyItems, true},
		{"no-weight", valid("no-weight"), noWeight, true},
		{"no-deadline", without("no-deadline", wire.HeaderDeadline), one, true},
		{"bad-deadline", with("bad-deadline", wire.HeaderDeadline, "tomorrow"), one, true},
		{"", without("", wire.HeaderRequestID), one, false},
		{"bad-reply", with("bad-reply", wire.HeaderReplyTo, "sleipnir.infer.one"), one, false},
		// A header JetStream checks on every store: it held for the task stream, and is renamed on the copy.
		{"expected-stream", with("expected-stream", "Nats-Expected-Stream", wire.TaskStream(r.spec.Name)), []byte("x"), true},
	}
	for _, g := range garbage {
		r.publish("fast", "", time.Time{}, g.hdr, g.data)
	}
	r.publish("fast", "good", soon, nil, nil)
	testrig.Eventually(t, 10*time.Second, "the valid request served after the garbage", func() bool {
		return len(got.of("good")) == 1
	})
	if rm := got.of("good")[0]; rm.Error != "" || len(rm.Items) != 1 || rm.Items[0].Status != wire.ItemOK {
		t.Fatalf("after garbage, the valid request got %+v", rm)
	}
	testrig.Eventually(t, 5*time.Second, "every garbage message in the dead-letter stream", func() bool {
		return len(r.deadLetters(t)) == len(garbage)
	})
	// Answered at once, exactly once, or not at all when the headers do not say where.
	testrig.Consistently(t, 200*time.Millisecond, "no second answer", func() bool { return true })
	for _, g := range garbage {
		rms := got.of(g.id)
		if !g.answered {
			if g.id != "" && len(rms) > 0 {
				t.Errorf("%s: answered %+v with unreadable reply headers", g.id, rms)
			}
			continue
		}
		if len(rms) != 1 || !strings.Contains(rms[0].Error, wire.SetAsideUndecodable) || len(rms[0].Items) != 0 {
			t.Errorf("%s: answers %+v, want one request-level error naming %q", g.id, rms, wire.SetAsideUndecodable)
		}
	}
	for i, m := range r.deadLetters(t) {
		r.checkKept(t, m, garbage[i].hdr, garbage[i].data)
	}
	if st := w.Stats(); st.Discarded != uint64(len(garbage)) || st.SetAside[wire.SetAsideUndecodable] != uint64(len(garbage)) {
		t.Fatalf("stats %+v: want %d discarded and set aside", st, len(garbage))
	}
}

// checkKept checks a message set aside at its first delivery by w1 from a/fast: the original payload and headers
// (renamed where wire.SetAsideHeader says), and the set-aside headers.
func (r *rig) checkKept(t *testing.T, m *jetstream.RawStreamMsg, hdr nats.Header, data []byte) {
	t.Helper()
	if m.Subject != wire.DeadLetterSubject(r.spec.Name, "a", "fast") || !bytes.Equal(m.Data, data) {
		t.Errorf("dead letter %d: subject %s, data %q; want %q", m.Sequence, m.Subject, m.Data, data)
	}
	for k := range hdr {
		if got := m.Header.Get(wire.SetAsideHeader(k)); got != hdr.Get(k) {
			t.Errorf("dead letter %d: header %s = %q, want the original %q", m.Sequence, wire.SetAsideHeader(k), got, hdr.Get(k))
		}
	}
	if m.Header.Get(wire.HeaderSetAsideReason) != wire.SetAsideUndecodable ||
		m.Header.Get(wire.HeaderSetAsideSubject) != wire.TaskSubject(r.spec.Name, "a", "fast") ||
		m.Header.Get(wire.HeaderSetAsideDeliveries) != "1" || m.Header.Get(wire.HeaderSetAsideWorker) != "w1" ||
		m.Header.Get(wire.HeaderSetAsideError) == "" {
		t.Errorf("dead letter %d: set-aside headers %v", m.Sequence, m.Header)
	}
}

// TestWorkerSetsAsideACrashLoop: a message whose every taker dies before acknowledging it (here: fetched on a
// connection that is then closed, as a worker killed mid-batch leaves it) is not executed again once delivered
// bus.SetAsideAt times: the next worker sets it aside, with its headers and the reason, answers its request error
// exactly once, and goes on serving.
func TestWorkerSetsAsideACrashLoop(t *testing.T) {
	const ackWait = 200 * time.Millisecond // the backoff follows it: 0.2, 0.2, 0.4, 0.8, 1.6 s
	r := newRigAckWait(t, oneTask, ackWait)
	got := r.collect(t)
	soon := time.Now().Add(time.Minute)
	r.publish("fast", "poison", soon, nil, nil)
	w := r.crashLoop(t)
	testrig.Eventually(t, 10*time.Second, "the poison request answered", func() bool { return len(got.of("poison")) > 0 })
	r.publish("fast", "after", soon, nil, nil)
	testrig.Eventually(t, 5*time.Second, "a normal request served after it", func() bool { return len(got.of("after")) > 0 })
	if rm := got.of("after")[0]; rm.Error != "" || rm.Items[0].Status != wire.ItemOK {
		t.Fatalf("the request after the poison got %+v", rm)
	}
	// The reserve delivery must not come: the message was terminated.
	testrig.Consistently(t, 4*ackWait, "no second answer", func() bool { return len(got.of("poison")) == 1 })
	if rm := got.of("poison")[0]; !strings.Contains(rm.Error, wire.SetAsideRedelivered) || len(rm.Items) != 0 {
		t.Fatalf("the poison request got %+v, want a request-level error naming %q", rm, wire.SetAsideRedelivered)
	}
	dl := r.deadLetters(t)
	if len(dl) != 1 {
		t.Fatalf("%d messages in the dead-letter stream, want 1", len(dl))
	}
	m := dl[0]
	if m.Header.Get(wire.HeaderRequestID) != "poison" || m.Header.Get(wire.HeaderReplyTo) != r.reply ||
		m.Header.Get(wire.HeaderDeadline) != wire.FormatDeadline(soon) ||
		m.Header.Get(wire.HeaderSetAsideReason) != wire.SetAsideRedelivered ||
		m.Header.Get(wire.HeaderSetAsideDeliveries) != strconv.Itoa(bus.SetAsideAt) {
		t.Fatalf("dead letter headers %v", m.Header)
	}
	if st := w.Stats(); st.SetAside[wire.SetAsideRedelivered] != 1 || st.Items != 1 {
		t.Fatalf("stats %+v: want 1 set aside for redelivery, 1 item executed (the one after)", st)
	}
	info, err := r.js.Stream(context.Background(), wire.TaskStream(r.spec.Name))
	if err != nil {
		t.Fatal(err)
	}
	if st := info.CachedInfo().State; st.Msgs != 0 {
		t.Fatalf("%d messages left in the task stream", st.Msgs)
	}
}

// TestLateMessageAtTheBoundIsDropped: a message that reaches the delivery bound after its deadline is dropped as any
// late message is (answered `dropped`), not set aside as poison: it would not be executed, and on a busy machine
// late messages reach the bound without any worker dying of them.
func TestLateMessageAtTheBoundIsDropped(t *testing.T) {
	const ackWait = 200 * time.Millisecond
	r := newRigAckWait(t, oneTask, ackWait)
	got := r.collect(t)
	r.publish("fast", "late", time.Now().Add(300*time.Millisecond), nil, nil)
	r.crashLoop(t)
	testrig.Eventually(t, 10*time.Second, "the late request answered", func() bool { return len(got.of("late")) > 0 })
	if rm := got.of("late")[0]; rm.Error != "" || len(rm.Items) != 1 || rm.Items[0].Status != wire.ItemDropped {
		t.Fatalf("the late request got %+v, want its item dropped", rm)
	}
	if dl := r.deadLetters(t); len(dl) != 0 {
		t.Fatalf("%d messages in the dead-letter stream, want none", len(dl))
	}
}

// crashLoop has the message waiting at variant a/fast taken by a worker that dies without acknowledging it (its
// connection closes), as many times as the delivery bound allows before the set-aside, then starts a worker, w1,
// that serves the variant and so takes the message's next delivery.
func (r *rig) crashLoop(t *testing.T) *Worker {
	t.Helper()
	for i := 1; i < bus.SetAsideAt; i++ {
		nc := r.srv.Connect(t, fmt.Sprint("crashing-", i))
		if n := testrig.DieHolding(t, nc, wire.TaskStream(r.spec.Name), wire.Consumer("a", "fast"), 10*time.Second); n != uint64(i) {
			t.Fatalf("crash %d: delivery %d", i, n)
		}
	}
	w := r.startWorker("w1")
	r.assign("w1", "fast")
	r.waitServing(w, "fast")
	return w
}
