package main

import (
	"time"

	"github.com/nats-io/nats.go"
)

// ClientOptions are loadgen's connection settings, and what a client of Sleipnir should use: reconnect forever
// (a server restart must not end the client), retry every 100 ms with little jitter (the frontends reconnect as
// fast; a client that waits the default 2 s loses its replies for that long), and buffer up to 64 MiB published
// while disconnected (at 150 requests/s of 48 KiB, about 9 s of load; nats.go's default of 8 MiB is about 1 s,
// after which publishes fail). What is buffered is sent on reconnect, after the client's subscriptions are
// re-established, so replies to it have somewhere to go.
func ClientOptions(name string) []nats.Option {
	return []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		nats.ReconnectJitter(50*time.Millisecond, 50*time.Millisecond),
		nats.ReconnectBufSize(64 << 20),
	}
}

// noDeadlineRetry is how long after its first attempt a request without a known deadline (the frontend applies the
// pipeline's SLO, which the client does not know) may be sent again.
const noDeadlineRetry = 2 * time.Second

// After "no responders" a request is sent again after a wait that doubles from retryFirstWait to retryMaxWait: the
// frontends re-subscribe within their reconnect period (250 ms) of a server restart.
const (
	retryFirstWait = 50 * time.Millisecond
	retryMaxWait   = 200 * time.Millisecond
)

// reconnectRetry is how long after a reconnect a request resent then may be retried on "no responders", even past
// its deadline: the frontends may re-subscribe after the client does, and the resend is how the client learns the
// fate of a request whose reply is gone.
const reconnectRetry = time.Second

// What a client should do to lose nothing, as loadgen does unless Config.NoRetry: core NATS request-reply is at most
// once, so what is inside the server when it dies (requests and replies alike) is gone, and a reply published
// before the client has re-subscribed after a reconnect has nowhere to go. So after a reconnect the client sends
// again, once, each request still unanswered when the connection dropped, with the same absolute deadline; and a
// "no responders" answer (the request reached no frontend, which happens while the frontends re-subscribe) is
// tried again after a short wait while the deadline allows. Each attempt has a new reply subject. A request may
// then be served twice and its client told twice, once per attempt: the first reply is its outcome.

// resendOnReconnect has the run resend, after a reconnect, what the dropped connection left unanswered; the
// connection's own handlers still run. The returned func puts them back.
func (r *run) resendOnReconnect(nc *nats.Conn) (restore func()) {
	prevDisconnect, prevReconnect := nc.Opts.DisconnectedErrCB, nc.Opts.ReconnectedCB
	nc.SetDisconnectErrHandler(func(c *nats.Conn, err error) {
		r.onDisconnect()
		if prevDisconnect != nil {
			prevDisconnect(c, err)
		}
	})
	nc.SetReconnectHandler(func(c *nats.Conn) {
		r.onReconnect()
		if prevReconnect != nil {
			prevReconnect(c)
		}
	})
	return func() {
		nc.SetDisconnectErrHandler(prevDisconnect)
		nc.SetReconnectHandler(prevReconnect)
	}
}

func (r *run) onDisconnect() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.disconnectedAt.IsZero() {
		r.disconnectedAt = time.Now()
	}
}

// onReconnect runs after the client's subscriptions are re-established and what it buffered is sent.
func (r *run) onReconnect() {
	r.mu.Lock()
	at := r.disconnectedAt
	r.disconnectedAt = time.Time{}
	var again []*pendingReq
	now := time.Now()
	for _, p := range r.requests {
		if !p.settled() && !p.resent && p.lastSent.Before(at) {
			p.resent = true
			p.retryEnd = later(p.retryEnd, now.Add(reconnectRetry))
			again = append(again, p)
		}
	}
	r.mu.Unlock()
	for _, p := range again {
		r.sendAgain(p, true)
	}
}

// sendAgain sends another attempt of p, unless it is settled or past its last time to try. The resend after a
// reconnect may be sent when the deadline has passed: the frontend then refuses it at once, and so the client
// learns the request's fate when its reply (inside the dead server, or flushed by a frontend before the client had
// re-subscribed) is gone.
func (r *run) sendAgain(p *pendingReq, afterReconnect bool) {
	r.mu.Lock()
	now := time.Now()
	if r.done || p.settled() {
		r.mu.Unlock()
		return
	}
	if now.After(p.retryEnd) {
		// A retry whose timer fired past the request's last time to try (a busy machine runs timers late): its
		// "no responders" is the outcome, or the request would wait for a reply nobody will send.
		if !afterReconnect {
			r.noRespondersLocked(p)
		}
		r.mu.Unlock()
		return
	}
	m := r.attemptLocked(p, now)
	if !p.warmup {
		if afterReconnect {
			r.sum.Resent++
		} else {
			r.sum.Retried++
		}
	}
	r.mu.Unlock()
	r.publish(p, m)
}

// retryLocked schedules another attempt after "no responders", if the request's deadline allows one.
func (r *run) retryLocked(p *pendingReq, now time.Time) bool {
	if r.noRetry || r.done {
		return false
	}
	wait := max(p.retryWait, retryFirstWait)
	if now.Add(wait).After(p.retryEnd) {
		return false
	}
	p.retryWait = min(2*wait, retryMaxWait)
	time.AfterFunc(wait, func() { r.sendAgain(p, false) })
	return true
}

// noRespondersLocked makes "no responders" p's outcome: no frontend took it, and no retry is left.
func (r *run) noRespondersLocked(p *pendingReq) {
	p.answered = true
	if p.warmup {
		return
	}
	r.series[p.second].Violations++
	r.noResp++
	r.sum.Errors++
	if r.sum.FirstError == "" {
		r.sum.FirstError = "no responders"
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
