package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/natsproc"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestNothingLostAcrossAServerRestart: a real nats-server is killed under load and restarted 600 ms later. The
// responder (in place of a frontend) answers each request 300 ms after it arrives, keeps no reconnect buffer, so
// that its replies during the outage are gone as those inside a dying server are, and reconnects 500 ms after the
// client does, so that what the client sends first after the restart reaches no one. With loadgen's defaults nothing
// is lost and every request is answered ok: the requests unanswered at the kill are sent again after the reconnect,
// and "no responders" is tried again until the responder is back. The same run without them (Config.NoRetry) loses
// requests or gets "no responders", which shows the run can fail.
func TestNothingLostAcrossAServerRestart(t *testing.T) {
	if _, err := natsproc.Binary(); err != nil {
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("restarts a nats-server")
	}
	for _, noRetry := range []bool{false, true} {
		srv, err := natsproc.Start(natsproc.Config{Name: "loadgen-restart"})
		if err != nil {
			t.Fatal(err)
		}
		var replyFailures atomic.Int64
		responder, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(600*time.Millisecond),
			nats.ReconnectJitter(0, 0), nats.ReconnectBufSize(-1))
		if err != nil {
			t.Fatal(err)
		}
		ok, _ := msgpack.Marshal(&wire.InferReply{RequestID: "x", Pipeline: "p", Status: wire.StatusOK})
		if _, err := responder.Subscribe(wire.InferSubject("p"), func(m *nats.Msg) {
			go func() {
				time.Sleep(300 * time.Millisecond)
				if m.Respond(ok) != nil {
					replyFailures.Add(1)
				}
			}()
		}); err != nil {
			t.Fatal(err)
		}
		responder.Flush()
		client, err := nats.Connect(srv.URL(), ClientOptions("loadgen-test")...)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(1200 * time.Millisecond)
			srv.Kill()
			time.Sleep(600 * time.Millisecond)
			if err := srv.Restart(); err != nil {
				t.Error(err)
			}
		}()
		s, err := Run(context.Background(), client, Config{Pipeline: "p", QPS: 50, Duration: 3 * time.Second,
			Timeout: 3 * time.Second, Grace: time.Second, NoRetry: noRetry}, nil)
		client.Close()
		responder.Close()
		srv.Stop()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("retry %v: %+v; the responder failed to send %d replies", !noRetry, s, replyFailures.Load())
		if replyFailures.Load() == 0 {
			t.Errorf("retry %v: no reply was lost in the outage: the run tests nothing", !noRetry)
		}
		if noRetry {
			if s.Lost == 0 && s.Errors == 0 {
				t.Errorf("without retries, nothing was lost and no request failed: the run tests nothing")
			}
			continue
		}
		if s.Sent == 0 || s.OK != s.Sent || s.Lost != 0 || s.Duplicates != 0 {
			t.Errorf("sent %d ok %d lost %d errors %d (first %q) duplicates %d: want every request answered ok once",
				s.Sent, s.OK, s.Lost, s.Errors, s.FirstError, s.Duplicates)
		}
		if s.Resent == 0 || s.Retried == 0 {
			t.Errorf("resent %d after the reconnect, retried %d after no responders: want both", s.Resent, s.Retried)
		}
	}
}
