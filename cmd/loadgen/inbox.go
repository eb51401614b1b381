package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// subscribeInbox subscribes to the client's reply subjects and fails at once, rather than lose every reply, when
// the server refuses them: another user's inbox prefix.
func subscribeInbox(nc *nats.Conn, subject string, cb nats.MsgHandler) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(subject, cb)
	if err != nil {
		return nil, err
	}
	// The server answers the subscription, if it refuses it, before the flush's PONG.
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("%w: the inbox prefix is not this NATS user's; give --inbox-prefix %s "+
			"(schemas/README.md)", err, wire.ClientInboxPrefix("<user>"))
	}
	return sub, nil
}
