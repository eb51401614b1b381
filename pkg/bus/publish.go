package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Backoff between the sends of one message while its stream has no leader or the connection is down: short first (a
// leader handed over by a node stopping gracefully is back within milliseconds, a connection within the reconnect
// wait), then at most every 250 ms (an election after a crash takes 4 to 9 s, and every request in flight retries
// meanwhile).
const (
	leaderlessFirstWait = 20 * time.Millisecond
	leaderlessMaxWait   = 250 * time.Millisecond
)

// PublishAsync sends msg to JetStream and waits for the stream's acknowledgement until ctx ends. sent, if not nil,
// is called once the first send has left (the caller's turn may pass then).
//
// It sends the same message again, with the same headers and so the same message id (JetStream keeps one copy
// whatever arrives twice), after a short backoff, while no server answers for the stream's subject ("no response
// from stream": in clustered JetStream only the stream's leader listens, so this is the time between a leader's loss
// and its successor's election) or the connection was lost with the acknowledgement outstanding (the node it was on
// died); as long as the next send can leave before ctx's deadline. Then it returns an error that wraps the last one,
// before the deadline, so that the caller can still say why. A duplicate acknowledgement after a lost connection is
// the copy an earlier send left: it is returned as a first one. If ctx ends while it waits for an answer, it returns
// ctx's error. Any other error is returned at once. opts are the publish's (its stall wait, say); the retries are
// this function's, not nats.go's.
func PublishAsync(ctx context.Context, js jetstream.JetStream, msg *nats.Msg, sent func(),
	opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	opts = append(opts, jetstream.WithRetryAttempts(0))
	start, wait := time.Now(), leaderlessFirstWait
	maybeStored := false
	for sends := 1; ; sends++ {
		fut, err := js.PublishMsgAsync(msg, opts...)
		if sent != nil {
			sent()
			sent = nil
		}
		if err != nil {
			return nil, err
		}
		select {
		case ack := <-fut.Ok():
			if ack.Duplicate && maybeStored {
				first := *ack
				first.Duplicate = false
				return &first, nil
			}
			return ack, nil
		case err = <-fut.Err():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		switch {
		case errors.Is(err, nats.ErrDisconnected):
			maybeStored = true
		case !errors.Is(err, jetstream.ErrNoStreamResponse):
			return nil, err
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) <= wait || !sleep(ctx, wait) {
			return nil, fmt.Errorf("%w: no stream took it in %d sends over %v", err, sends,
				time.Since(start).Round(time.Millisecond))
		}
		wait = min(2*wait, leaderlessMaxWait)
	}
}
