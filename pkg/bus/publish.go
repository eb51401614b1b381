package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Backoff between the sends of one message while its stream has no leader: short first (a leader handed over by
// a node stopping gracefully is back within milliseconds), then at most every 250 ms (an election after a crash
// takes 4 to 9 s, and every request in flight retries meanwhile).
const (
	leaderlessFirstWait = 20 * time.Millisecond
	leaderlessMaxWait   = 250 * time.Millisecond
)

// PublishAsync sends msg to JetStream and waits for the stream's acknowledgement until ctx ends. sent, if not nil,
// is called once the first send has left (the caller's turn may pass then). While no server answers for the
// stream's subject ("no response from stream": in clustered JetStream only the stream's leader listens, so this is
// the time between a leader's loss and its successor's election), it sends the same message again, with the same
// headers and so the same message id (JetStream keeps one copy whatever arrives twice), after a short backoff, as
// long as the next send can leave before ctx's deadline; then it returns an error that wraps
// jetstream.ErrNoStreamResponse, before the deadline, so that the caller can still say why. If ctx ends while it
// waits for an answer, it returns ctx's error. Any other error is returned at once. opts are the publish's (its
// stall wait, say); the retries are this function's, not nats.go's.
func PublishAsync(ctx context.Context, js jetstream.JetStream, msg *nats.Msg, sent func(),
	opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	opts = append(opts, jetstream.WithRetryAttempts(0))
	start, wait := time.Now(), leaderlessFirstWait
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
			return ack, nil
		case err = <-fut.Err():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !errors.Is(err, jetstream.ErrNoStreamResponse) {
			return nil, err
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) <= wait || !sleep(ctx, wait) {
			return nil, fmt.Errorf("%w: no server took it for a stream in %d sends over %v", err, sends,
				time.Since(start).Round(time.Millisecond))
		}
		wait = min(2*wait, leaderlessMaxWait)
	}
}
