package bus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Puller takes a variant's messages from its durable consumer as a worker needs them, over one subscription that
// lasts as long as the worker serves the variant. jetstream.Consumer.Fetch opens a subscription (SUB and UNSUB on
// the server), a goroutine and a timer per call: a worker that fetches once a batch paid that on every hop, beside
// its forwarding (BenchmarkHop). A pull here is one pull request; nothing is fetched before it is asked for, so no
// message waits in a busy worker that an idle replica could take (a Consume with its prefetch would).
type Puller struct {
	sub *nats.Subscription
	// The last wait's option and the messages' slice, kept from one Fetch to the next (a worker's hop path).
	wait    time.Duration
	waitOpt nats.PullOpt
	out     []jetstream.Msg
}

// BindPuller binds a Puller to a variant's durable consumer, which the planner creates (BindVariantConsumer); it
// never creates or updates the consumer, and Close leaves it in place.
func BindPuller(nc *nats.Conn, pipeline, task, variant string) (*Puller, error) {
	js, err := nc.JetStream()
	if err != nil {
		return nil, err
	}
	stream, durable := wire.TaskStream(pipeline), wire.Consumer(task, variant)
	sub, err := js.PullSubscribe(wire.TaskSubject(pipeline, task, variant), durable, nats.Bind(stream, durable))
	if err != nil {
		return nil, err
	}
	return &Puller{sub: sub}, nil
}

// Fetch waits up to wait for at most n messages; none when none came in time. The slice is the Puller's until the
// next Fetch (one goroutine fetches).
func (p *Puller) Fetch(n int, wait time.Duration) ([]jetstream.Msg, error) {
	if p.waitOpt == nil || wait != p.wait {
		p.wait, p.waitOpt = wait, nats.MaxWait(wait)
	}
	ms, err := p.sub.Fetch(n, p.waitOpt)
	if err != nil && !errors.Is(err, nats.ErrTimeout) {
		return nil, err
	}
	clear(p.out)
	p.out = p.out[:0]
	for _, m := range ms {
		p.out = append(p.out, pulled{m})
	}
	return p.out, nil
}

// Close ends the subscription (the consumer stays: it is the planner's).
func (p *Puller) Close() error { return p.sub.Unsubscribe() }

// pulled is a message a Puller took, as the jetstream package's Msg, so that the rest of a worker handles it as
// one that package fetched; the acknowledgements are nats.go's own.
type pulled struct{ m *nats.Msg }

func (p pulled) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := p.m.Metadata()
	if err != nil {
		return nil, err
	}
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Consumer: md.Sequence.Consumer,
		Stream: md.Sequence.Stream}, NumDelivered: md.NumDelivered, NumPending: md.NumPending,
		Timestamp: md.Timestamp, Stream: md.Stream, Consumer: md.Consumer, Domain: md.Domain}, nil
}

func (p pulled) Data() []byte                           { return p.m.Data }
func (p pulled) Headers() nats.Header                   { return p.m.Header }
func (p pulled) Subject() string                        { return p.m.Subject }
func (p pulled) Reply() string                          { return p.m.Reply }
func (p pulled) Ack() error                             { return p.m.Ack() }
func (p pulled) DoubleAck(ctx context.Context) error    { return p.m.AckSync(nats.Context(ctx)) }
func (p pulled) Nak() error                             { return p.m.Nak() }
func (p pulled) NakWithDelay(delay time.Duration) error { return p.m.NakWithDelay(delay) }
func (p pulled) InProgress() error                      { return p.m.InProgress() }
func (p pulled) Term() error                            { return p.m.Term() }
func (p pulled) TermWithReason(reason string) error {
	if reason == "" {
		return p.m.Term()
	}
	// nats.go's message has no Term with a reason: JetStream's acknowledgement "+TERM <reason>", as its jetstream
	// package sends it.
	return p.m.Respond([]byte("+TERM " + reason))
}
