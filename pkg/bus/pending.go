package bus

import (
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
)

// Pending limits. The NATS client holds a subscription's messages in memory until its callback takes them; past the
// subscription's limits it drops them (a slow consumer), counts them (Subscription.Dropped) and reports it to the
// connection's error handler, which logs it rate-limited (connOptions). Every plain subscription of a service gets
// limits sized from its configuration, so that a flood costs dropped messages, not memory without bound.

// ControlPending bounds the subscriptions that answer monitoring requests (the NATS micro protocol's $SRV.* and the
// services' status endpoints): their requests are small and answered at once, so a backlog is a flood.
var ControlPending = Limits{Msgs: 256, Bytes: 1 << 20}

// Limits are a subscription's pending limits: messages and bytes, both positive.
type Limits struct{ Msgs, Bytes int }

// Subscribe subscribes cb to subject (in queue, unless "") with the pending limits l; drops, if not nil, counts what
// the client drops from it.
func Subscribe(nc *nats.Conn, subject, queue string, cb nats.MsgHandler, l Limits, drops *Drops) (*nats.Subscription, error) {
	sub, err := nc.QueueSubscribe(subject, queue, cb)
	if err != nil {
		return nil, err
	}
	if err := Bound(sub, l, drops); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return sub, nil
}

// Bound sets sub's pending limits; drops, if not nil, counts what the client drops from it.
func Bound(sub *nats.Subscription, l Limits, drops *Drops) error {
	if l.Msgs <= 0 || l.Bytes <= 0 {
		return fmt.Errorf("pending limits of %s: %d messages, %d bytes: want both positive", sub.Subject, l.Msgs, l.Bytes)
	}
	if err := sub.SetPendingLimits(l.Msgs, l.Bytes); err != nil {
		return fmt.Errorf("pending limits of %s: %w", sub.Subject, err)
	}
	if drops != nil {
		drops.add(sub)
	}
	return nil
}

// Drops counts the messages the NATS client dropped from some subscriptions, as a counter that never decreases:
// Subscription.Dropped is only readable while the subscription is valid, so the last count read is kept. The zero
// value is ready to use.
type Drops struct {
	mu   sync.Mutex
	subs []*nats.Subscription
	seen []uint64
}

func (d *Drops) add(sub *nats.Subscription) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.subs = append(d.subs, sub)
	d.seen = append(d.seen, 0)
}

// Total is how many messages were dropped from the subscriptions so far.
func (d *Drops) Total() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var total uint64
	for i, sub := range d.subs {
		if n, err := sub.Dropped(); err == nil && uint64(n) > d.seen[i] {
			d.seen[i] = uint64(n)
		}
		total += d.seen[i]
	}
	return total
}
