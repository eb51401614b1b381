package worker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
)

// deliveredMsg is a task message as JetStream delivers it for the n-th time: redeliveryDelay reads only that.
type deliveredMsg struct {
	jetstream.Msg
	n uint64
}

func (m deliveredMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{NumDelivered: m.n}, nil
}

// TestRedeliveryOutlastsAnElection: a message whose sub-requests keep finding no stream leader is delivered again
// no sooner than an election after a crash ends (9 s at most) before it reaches the dead-letter bound, so that it is
// not set aside as poison for an election; other failures are retried sooner.
func TestRedeliveryOutlastsAnElection(t *testing.T) {
	leaderless := fmt.Errorf("publish to sleipnir.task.p.b.x: %w", jetstream.ErrNoStreamResponse)
	var total time.Duration
	for n := uint64(1); n < bus.SetAsideAt; n++ {
		total += redeliveryDelay(deliveredMsg{n: n}, leaderless)
	}
	if total < 9*time.Second {
		t.Errorf("the deliveries before the dead-letter bound span %v of waits: an election may outlast them", total)
	}
	if d := redeliveryDelay(deliveredMsg{n: 1}, errors.New("other")); d != 100*time.Millisecond {
		t.Errorf("a first redelivery after another failure waits %v, want 100ms", d)
	}
	if d := redeliveryDelay(deliveredMsg{n: 1}, fmt.Errorf("report: %w", nats.ErrNoResponders)); d != time.Second {
		t.Errorf("a result with no frontend to confirm it waits %v, want 1s", d)
	}
}
