package up

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestDeployConfigDeadLetter: under the deploy configuration on a real nats-server, the planner declares the
// dead-letter stream, a worker sets aside there an undecodable task message (its publish confirmed) and answers its
// request, the observer may read the stream, and a client may not.
func TestDeployConfigDeadLetter(t *testing.T) {
	s, seeds := deployServer(t)
	d := startDeployed(t, s.URL(), seeds, jetstream.MemoryStorage)
	// The frontends' user may publish task messages and read results: it plays a poisoner.
	fe, _ := connectAs(t, s.URL(), seeds, auth.User{Role: auth.Frontend})
	replyTo := wire.ResultSubject("poisoner")
	answers, err := fe.SubscribeSync(replyTo)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(wire.TaskSubject(d.spec.Name, "a", "x"))
	wire.TaskHeaders{RequestID: "poison", Deadline: time.Now().Add(time.Minute), ReplyTo: replyTo,
		MsgID: "poison"}.Write(m.Header.Set)
	m.Data = []byte("not msgpack")
	if err := fe.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	got, err := answers.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the poison message's request was not answered: %v", err)
	}
	var rm wire.ResultMessage
	if err := msgpack.Unmarshal(got.Data, &rm); err != nil || rm.RequestID != "poison" ||
		!strings.Contains(rm.Error, wire.SetAsideUndecodable) {
		t.Fatalf("answer %+v (%v), want a request-level error naming %q", rm, err, wire.SetAsideUndecodable)
	}

	observer, _ := connectAs(t, s.URL(), seeds, auth.User{Role: auth.Observer})
	st, err := testrig.JetStream(t, observer).Stream(d.ctx, wire.DeadLetterStream)
	if err != nil {
		t.Fatalf("the observer cannot read %s: %v", wire.DeadLetterStream, err)
	}
	kept, err := st.GetMsg(d.ctx, st.CachedInfo().State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	if kept.Header.Get(wire.HeaderRequestID) != "poison" || string(kept.Data) != "not msgpack" ||
		kept.Header.Get(wire.HeaderSetAsideReason) != wire.SetAsideUndecodable {
		t.Fatalf("kept %v %q", kept.Header, kept.Data)
	}
	// The observer pages through it as `nats stream view` does: an ephemeral consumer, pulled.
	cons, err := st.OrderedConsumer(d.ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil ||
		msg.Headers().Get(wire.HeaderSetAsideReason) != wire.SetAsideUndecodable {
		t.Fatalf("paging the stream: %v", err)
	}

	client, clientV := connectAs(t, s.URL(), seeds, auth.User{Role: auth.Client})
	info := "$JS.API.STREAM.INFO." + wire.DeadLetterStream
	if _, err := client.Request(info, nil, time.Second); err == nil {
		t.Fatal("a client read the dead-letter stream's info")
	}
	clientV.expect(t, "client reads the dead-letter stream", info)
	d.checkNoViolations(t)
}
