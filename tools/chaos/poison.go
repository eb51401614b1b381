package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// poisonWait is how long a poison message's request may take to be answered.
const poisonWait = 10 * time.Second

// poisonFault publishes task messages straight to the queue of a variant of the root task, as anyone allowed to
// publish task messages could (the frontends' user here; anyone, without permissions): an undecodable payload with
// valid headers, and an item whose UINT8 image claims shape [274177, 67280421310721, 3] over 3 bytes (its product
// wraps around to 3 in 64 bits; issue 35: it made an OCR worker panic). Each must be answered on the result subject
// its headers name, the undecodable one with a request-level error (it is set aside in the dead-letter stream), and
// no service may crash (the suite counts crashes).
var poisonFault = Fault{Name: "poison-message",
	Doc: "publish straight to a root variant's queue, as the frontends' user, an undecodable task message with valid " +
		"headers and one whose UINT8 image claims shape [274177, 67280421310721, 3] over 3 bytes: each answered, none crashes a worker",
	Inject: func(ctx context.Context, s *System) ([]string, []string, error) { return s.injectPoison(ctx) },
}

func (s *System) injectPoison(ctx context.Context) ([]string, []string, error) {
	victims, err := s.activeWorkers(ctx, 1)
	if err != nil {
		return nil, nil, err
	}
	a := victims[0]
	opts, err := s.cfg.Auth.options("poisoner", RoleFrontend)
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(s.URLs(), append(opts, nats.Name("sleipnir-chaos-poisoner"),
		nats.CustomInboxPrefix(wire.InboxPrefix(RoleFrontend)))...)
	if err != nil {
		return nil, nil, err
	}
	defer nc.Close()
	replyTo := wire.ResultSubject("chaos-poison")
	answers, err := nc.SubscribeSync(replyTo)
	if err != nil {
		return nil, nil, err
	}
	crafted, _ := msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: wire.RootItemID, Den: 1,
		Inputs: []wire.Tensor{{Name: "image", Datatype: "UINT8", Shape: []int64{274177, 67280421310721, 3},
			Data: []byte{1, 2, 3}}}}}})
	poisons := []struct {
		id, what string
		data     []byte
	}{
		{"poison-undecodable-" + strconv.FormatInt(time.Now().UnixNano(), 36), "undecodable", []byte("\xc1 not msgpack")},
		{"poison-shape-" + strconv.FormatInt(time.Now().UnixNano(), 36), "crafted shape", crafted},
	}
	subject := wire.TaskSubject(s.cfg.spec.Name, a.Task, a.Variant)
	for _, p := range poisons {
		m := nats.NewMsg(subject)
		wire.TaskHeaders{RequestID: p.id, Deadline: time.Now().Add(poisonWait), ReplyTo: replyTo,
			MsgID: wire.TaskMsgID(p.id, "", a.Task, a.Variant)}.Write(m.Header.Set)
		m.Data = p.data
		if err := nc.PublishMsg(m); err != nil {
			return nil, nil, err
		}
	}
	got := map[string][]wire.ResultMessage{}
	for end := time.Now().Add(poisonWait); time.Now().Before(end) && (len(got) < len(poisons)); {
		m, err := answers.NextMsg(time.Until(end))
		if err != nil {
			break
		}
		var rm wire.ResultMessage
		if wire.UnmarshalMsgpack(m.Data, &rm) == nil {
			got[rm.RequestID] = append(got[rm.RequestID], rm)
		}
	}
	notes := []string{"poison sent to " + subject}
	var failures []string
	for i, p := range poisons {
		rms := got[p.id]
		switch {
		case len(rms) == 0:
			failures = append(failures, fmt.Sprintf("the %s poison message was not answered within %v", p.what, poisonWait))
		case i == 0 && rms[0].Error == "":
			failures = append(failures, fmt.Sprintf("the %s poison message was answered %+v, not with an error", p.what, rms[0]))
		default:
			notes = append(notes, fmt.Sprintf("%s answered: %s", p.what, describeAnswer(rms[0])))
		}
	}
	if n, err := s.deadLetters(ctx); err == nil {
		notes = append(notes, fmt.Sprintf("%d message(s) in %s", n, wire.DeadLetterStream))
	}
	return notes, failures, nil
}

// describeAnswer says what a result message holds: its request-level error, or its leaves' statuses and reasons.
func describeAnswer(rm wire.ResultMessage) string {
	if rm.Error != "" {
		return "error: " + rm.Error
	}
	out := ""
	for _, it := range rm.Items {
		out += " " + it.Status
		if it.Reason != "" {
			out += " (" + it.Reason + ")"
		}
	}
	return fmt.Sprintf("%d leaves:%s", len(rm.Items), out)
}

// deadLetters is how many messages the dead-letter stream holds (the suite's observer may read it).
func (s *System) deadLetters(ctx context.Context) (uint64, error) {
	js, err := jetstream.New(s.NC)
	if err != nil {
		return 0, err
	}
	st, err := js.Stream(ctx, wire.DeadLetterStream)
	if err != nil {
		return 0, errors.Join(errors.New("dead-letter stream"), err)
	}
	return st.CachedInfo().State.Msgs, nil
}
