// A test client of its own, rather than nats.Conn.Request, because a test must see every reply to a request (a
// second one is a defect), and when the first came.

package testrig

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Client sends requests, each with a reply subject of its own, on one wildcard subscription, and records every
// reply and when the first came, so that a test can check that each request got exactly one, and how fast.
type Client struct {
	nc      *nats.Conn
	prefix  string
	mu      sync.Mutex
	n       int
	sent    map[string]time.Time
	replies map[string][]*nats.Msg
	at      map[string]time.Time // first reply
}

// NewClient subscribes to the client's replies on nc, under its inbox prefix.
func NewClient(t testing.TB, nc *nats.Conn) *Client {
	t.Helper()
	c := &Client{nc: nc, prefix: nc.NewInbox(), sent: map[string]time.Time{}, replies: map[string][]*nats.Msg{},
		at: map[string]time.Time{}}
	if _, err := nc.Subscribe(c.prefix+".*", func(m *nats.Msg) {
		now := time.Now()
		c.mu.Lock()
		if len(c.replies[m.Subject]) == 0 {
			c.at[m.Subject] = now
		}
		c.replies[m.Subject] = append(c.replies[m.Subject], m)
		c.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// Conn is the client's connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Send publishes one request to a pipeline and returns its reply subject.
func (c *Client) Send(t testing.TB, pipeline string, data []byte, hdr nats.Header) string {
	t.Helper()
	m := nats.NewMsg(wire.InferSubject(pipeline))
	m.Data = data
	for k, v := range hdr {
		m.Header[k] = v
	}
	c.mu.Lock()
	c.n++
	m.Reply = fmt.Sprintf("%s.%d", c.prefix, c.n)
	c.sent[m.Reply] = time.Now()
	c.mu.Unlock()
	if err := c.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	return m.Reply
}

// Wait returns the replies of the given subjects once each has at least one, failing after timeout. A reply that
// comes later is not in the map: see ExpectOneReply and Replies.
func (c *Client) Wait(t testing.TB, subjects []string, timeout time.Duration) map[string][]*nats.Msg {
	t.Helper()
	missing := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := 0
		for _, s := range subjects {
			if len(c.replies[s]) == 0 {
				n++
			}
		}
		return n
	}
	if err := WaitFor(timeout, fmt.Sprintf("a reply to each of %d requests", len(subjects)), func() bool {
		return missing() == 0
	}); err != nil {
		t.Fatalf("%v: %d got none", err, missing())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string][]*nats.Msg, len(subjects))
	for _, s := range subjects {
		out[s] = c.replies[s]
	}
	return out
}

// ExpectOneReply waits d, the time a second reply to a request would take to come, and fails the test as soon as one
// of subjects has more than one reply. (The map Wait returned holds only the replies that had come by then.)
func (c *Client) ExpectOneReply(t testing.TB, subjects []string, d time.Duration) {
	t.Helper()
	var twice string
	var n int
	if _, ok := holds(d, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, s := range subjects {
			if n = len(c.replies[s]); n > 1 {
				twice = s
				return false
			}
		}
		return true
	}); !ok {
		t.Fatalf("request %s got %d replies, want exactly 1", twice, n)
	}
}

// Replies are every reply to subject so far.
func (c *Client) Replies(subject string) []*nats.Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*nats.Msg(nil), c.replies[subject]...)
}

// Latency is how long the first reply to subject took.
func (c *Client) Latency(subject string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[subject].Sub(c.sent[subject])
}
