package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestNothingLostAcrossAServerRestart: a real nats-server is killed under load and restarted 600 ms later. The
// responder (in place of a frontend) refuses a request whose Sleipnir-Deadline has passed and answers the others ok
// 300 ms after they arrive. The kill closes it, so that its replies pending then are gone as those inside a dying
// server are, and a new one subscribes 500 ms after the client reconnects, so that what the client sends first after
// the restart reaches no one. With loadgen's defaults nothing is lost: the requests unanswered at the kill are sent
// again after the reconnect (answered ok with a 3 s timeout; refused, their deadline past, with 500 ms), and "no
// responders" is tried again until the responder is back (with 3 s every request is answered ok). The same run
// without them (Config.NoRetry) loses requests, which shows the run can fail. The grace (3 s past the deadline) leaves
// the resends of requests the kill caught time to find the responder back.
func TestNothingLostAcrossAServerRestart(t *testing.T) {
	if _, err := natsproc.Binary(); err != nil {
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("restarts a nats-server")
	}
	for _, c := range []struct {
		timeout time.Duration
		noRetry bool
	}{{3 * time.Second, false}, {500 * time.Millisecond, false}, {500 * time.Millisecond, true}} {
		noRetry := c.noRetry
		srv, err := natsproc.Start(natsproc.Config{Name: "loadgen-restart"})
		if err != nil {
			t.Fatal(err)
		}
		var replyFailures atomic.Int64
		ok, _ := msgpack.Marshal(&wire.InferReply{RequestID: "x", Pipeline: "p", Status: wire.StatusOK})
		passed, _ := msgpack.Marshal(&wire.InferReply{RequestID: "x", Pipeline: "p", Status: wire.StatusError,
			Error: "deadline has already passed"})
		// The responder does not reconnect by itself: the kill closes it (its replies pending then fail), and a new
		// one subscribes 500 ms after the client is back, so that the client meets "no responders" whatever the
		// machine's speed (left to the two reconnect timers, both came back together in CI and nothing was retried).
		startResponder := func() (*nats.Conn, error) {
			nc, err := nats.Connect(srv.URL(), nats.NoReconnect())
			if err != nil {
				return nil, err
			}
			if _, err := nc.Subscribe(wire.InferSubject("p"), func(m *nats.Msg) {
				if d, err := wire.ParseDeadline(m.Header.Get(wire.HeaderDeadline)); err != nil || !d.After(time.Now()) {
					m.Respond(passed)
					return
				}
				go func() {
					time.Sleep(300 * time.Millisecond) // the responder's latency
					if m.Respond(ok) != nil {
						replyFailures.Add(1)
					}
				}()
			}); err != nil {
				nc.Close()
				return nil, err
			}
			return nc, nc.Flush()
		}
		first, err := startResponder()
		if err != nil {
			t.Fatal(err)
		}
		var responder atomic.Pointer[nats.Conn]
		responder.Store(first)
		client, err := nats.Connect(srv.URL(), ClientOptions("loadgen-test")...)
		if err != nil {
			t.Fatal(err)
		}
		go func() { // the outage: the kill 1.2 s into the load, 600 ms down, the responder back 500 ms after the client
			time.Sleep(1200 * time.Millisecond)
			srv.Kill()
			time.Sleep(600 * time.Millisecond)
			if err := srv.Restart(); err != nil {
				t.Error(err)
				return
			}
			if err := testrig.WaitFor(10*time.Second, "the client reconnects", func() bool {
				return client.IsConnected() || client.IsClosed()
			}); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(500 * time.Millisecond)
			nc, err := startResponder()
			if err != nil {
				t.Error(err)
				return
			}
			responder.Store(nc)
		}()
		s, err := Run(context.Background(), client, Config{Pipeline: "p", QPS: 50, Duration: 3 * time.Second,
			Timeout: c.timeout, Grace: 3 * time.Second, NoRetry: noRetry}, nil)
		client.Close()
		responder.Load().Close()
		srv.Stop()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v: %+v; the responder failed to send %d replies", c, s, replyFailures.Load())
		if replyFailures.Load() == 0 {
			t.Errorf("%+v: no reply was lost in the outage: the run tests nothing", c)
		}
		if noRetry {
			// Which error comes first ("no responders", or a resend-less deadline refusal) is a matter of timing.
			if s.Lost == 0 {
				t.Errorf("without retries nothing was lost (first error %q): the run tests nothing", s.FirstError)
			}
			continue
		}
		if s.Sent == 0 || s.Lost != 0 || s.Duplicates != 0 {
			t.Errorf("%+v: sent %d lost %d duplicates %d: want every request answered once", c, s.Sent, s.Lost,
				s.Duplicates)
		}
		// With a deadline past the outage every request is served; with 500 ms, those sent during the outage reach
		// no one or are refused, and those the kill caught are refused when resent.
		if c.timeout > 2*time.Second && s.OK != s.Sent {
			t.Errorf("%+v: %d of %d ok (first error %q): want every request ok", c, s.OK, s.Sent, s.FirstError)
		}
		// The run must have needed what it tests: resends always (the kill catches requests in flight); retries on
		// "no responders" where the deadline outlasts the outage (with 500 ms, whether one still has time left when
		// it meets the missing responder is a matter of milliseconds: 0 and 101 were both seen).
		if s.Resent == 0 || (c.timeout > 2*time.Second && s.Retried == 0) {
			t.Errorf("resent %d after the reconnect, retried %d after no responders: the run tests nothing", s.Resent,
				s.Retried)
		}
	}
}
