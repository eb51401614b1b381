package frontend

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestRestartUnderTheSameIDIsServed restarts a frontend under the same id: the second one's requests must not collide
// with the first one's in the stream's de-duplication window (issue 25, item 2: before, every one came back late).
func TestRestartUnderTheSameIDIsServed(t *testing.T) {
	s := startTestSystem(t, 10)
	c := s.newClient(t)
	for round := 0; round < 2; round++ {
		f, stop := s.startFrontend(t, Config{ID: "fx"})
		var subjects []string
		for i := 0; i < 10; i++ {
			subjects = append(subjects, c.Send(t, s.spec.Name, goodRequest(t), nil))
		}
		replies := c.Wait(t, subjects, 5*time.Second)
		for _, subj := range subjects {
			if rep := decodeReply(t, replies[subj][0]); rep.Status != wire.StatusOK {
				t.Errorf("frontend fx, start %d: reply %q %q, want ok", round+1, rep.Status, rep.Error)
			}
		}
		if st := f.Stats(); st.Late != 0 {
			t.Errorf("frontend fx, start %d: %d late replies", round+1, st.Late)
		}
		stop()
	}
}

// TestPublishFailureDoesNotStall removes the task stream, so that JetStream cannot take any request: the frontend
// sends each request again while its deadline allows (as while a stream has no leader), each on its own, and answers
// it with an error saying why before its deadline, instead of queueing behind each other's retries (issue 25, item
// 4; issue 35, item 7).
func TestPublishFailureDoesNotStall(t *testing.T) {
	s := startTestSystem(t, 0)
	f, _ := s.startFrontend(t, Config{ID: "fe"})
	js, err := jetstream.New(s.connect(t, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(context.Background(), wire.TaskStream(s.spec.Name)); err != nil {
		t.Fatal(err)
	}
	c := s.newClient(t)
	// Fewer than the intake's workers: each request holds one while it is sent again.
	const n, timeout = 20, time.Second
	var subjects []string
	for i := 0; i < n; i++ {
		subjects = append(subjects, c.Send(t, s.spec.Name, goodRequest(t), nats.Header{wire.HeaderTimeout: {"1s"}}))
	}
	replies := c.Wait(t, subjects, 5*time.Second)
	c.ExpectOneReply(t, subjects, 100*time.Millisecond)
	var worst time.Duration
	for _, subj := range subjects {
		rep := decodeReply(t, replies[subj][0])
		if rep.Status != wire.StatusError || !strings.Contains(rep.Error, "cannot enqueue") ||
			!strings.Contains(rep.Error, "sends over") {
			t.Errorf("reply %q %q, want an error saying the request could not be enqueued in several sends",
				rep.Status, rep.Error)
		}
		worst = max(worst, c.Latency(subj))
	}
	// The bound is loose (a busy machine); queued behind each other's retries, the last would come after n s.
	if worst > timeout+time.Second {
		t.Errorf("slowest error reply after %v", worst)
	}
	if st := f.Stats(); st.Accepted != 0 || st.Refused != n {
		t.Errorf("stats %+v, want %d refused", st, n)
	}
}

// TestAbsurdDeadlinesAreRefused: a deadline too far ahead (one past the year 2262 would go out negative, and no
// worker would ever answer it) is refused at once with a clear error (issue 25, item 6).
func TestAbsurdDeadlinesAreRefused(t *testing.T) {
	s := startTestSystem(t, 0)
	f, _ := s.startFrontend(t, Config{ID: "fe"})
	c := s.newClient(t)
	hdr := func(k, v string) nats.Header { return nats.Header{k: []string{v}} }
	tests := []struct {
		name string
		hdr  nats.Header
		want string
	}{
		{"timeout past 2262", hdr(wire.HeaderTimeout, "2500000h"), "further ahead than"},
		{"timeout of an hour", hdr(wire.HeaderTimeout, "1h"), "further ahead than"},
		{"deadline in 2255", hdr(wire.HeaderDeadline, "9000000000000000000"), "further ahead than"},
		{"deadline at the end of int64", hdr(wire.HeaderDeadline, "9223372036854775807"), "further ahead than"},
		{"deadline past int64", hdr(wire.HeaderDeadline, "9223372036854775808"), "want decimal Unix nanoseconds"},
	}
	var subjects []string
	for _, tc := range tests {
		subjects = append(subjects, c.Send(t, s.spec.Name, goodRequest(t), tc.hdr))
	}
	replies := c.Wait(t, subjects, 3*time.Second)
	for i, tc := range tests {
		rep := decodeReply(t, replies[subjects[i]][0])
		if rep.Status != wire.StatusError || !strings.Contains(rep.Error, tc.want) {
			t.Errorf("%s: reply %q %q, want an error containing %q", tc.name, rep.Status, rep.Error, tc.want)
		}
	}
	f.mu.Lock()
	pending := len(f.pending)
	f.mu.Unlock()
	if pending != 0 {
		t.Errorf("%d requests still pending", pending)
	}
}

// TestBadInputFloodIsCountedNotLogged floods the frontend's result subject, a task subject and the request subject
// with garbage: every message is counted, and each kind writes only a few log lines (issue 25, item 7).
func TestBadInputFloodIsCountedNotLogged(t *testing.T) {
	s := startTestSystem(t, 10)
	f, _ := s.startFrontend(t, Config{ID: "fe"})
	nc := s.connect(t, "attacker")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c := s.newClient(t)
	const n = 300
	var subjects []string
	for i := 0; i < n; i++ {
		if err := nc.Publish(wire.ResultSubject("fe"), []byte{0xc1, byte(i)}); err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(wire.TaskSubject(s.spec.Name, "find_text", "db_resnet_960"))
		m.Data = []byte{0xc1, byte(i)}
		m.Header.Set(wire.HeaderRequestID, "garbage")
		m.Header.Set(wire.HeaderReplyTo, wire.ResultSubject("fe"))
		m.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(time.Now().Add(time.Minute)))
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
		subjects = append(subjects, c.Send(t, s.spec.Name, []byte{0xc1, byte(i)}, nil))
	}
	<-js.PublishAsyncComplete()
	c.Wait(t, subjects, 5*time.Second)
	discarded := func() (d uint64) {
		for _, w := range s.workers {
			d += w.Stats().Discarded
		}
		return d
	}
	if err := testrig.WaitFor(10*time.Second, fmt.Sprintf("%d bad reports and %d task messages discarded", n, n),
		func() bool { return f.Stats().BadReports >= n && discarded() >= n }); err != nil {
		t.Fatalf("%v: %d bad reports, %d task messages discarded", err, f.Stats().BadReports, discarded())
	}
	if st := f.Stats(); st.Refused != n {
		t.Errorf("refused %d requests, want %d", st.Refused, n)
	}
	for _, msg := range []string{"discarding undecodable result message", "refused a bad request"} {
		if got := s.logs.count(msg); got > 5 {
			t.Errorf("%d log lines %q for %d occurrences, want at most 5", got, msg, n)
		}
	}
	// Each worker has its own limiter.
	if got := s.logs.count("discarding invalid task message"); got > 5*len(s.workers) {
		t.Errorf("%d log lines %q for %d occurrences, want at most %d", got, "discarding invalid task message", n, 5*len(s.workers))
	}
}

// TestDuplicateAckIsRefused makes the stream already hold a message with the id of the frontend's next task message:
// the publish is acknowledged as a duplicate and nothing is enqueued, which must be an error reply at once, not a
// silent wait for the deadline (issue 25, item 2).
func TestDuplicateAckIsRefused(t *testing.T) {
	s := startTestSystem(t, 0)
	f, _ := s.startFrontend(t, Config{ID: "fe"})
	js, err := jetstream.New(s.connect(t, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	next := wire.RequestID(f.cfg.ID, f.boot, f.seq.Load()+1)
	m := nats.NewMsg(wire.TaskSubject(s.spec.Name, "find_text", "db_resnet_960"))
	m.Header.Set(wire.HeaderMsgID, wire.TaskMsgID(next, "", "find_text", "db_resnet_960"))
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	c := s.newClient(t)
	subj := c.Send(t, s.spec.Name, goodRequest(t), nats.Header{wire.HeaderTimeout: []string{"10s"}})
	rep := decodeReply(t, c.Wait(t, []string{subj}, 5*time.Second)[subj][0])
	if rep.Status != wire.StatusError || !strings.Contains(rep.Error, "duplicate") {
		t.Errorf("reply %q %q, want an error saying the task message was taken for a duplicate", rep.Status, rep.Error)
	}
	if l := c.Latency(subj); l > 5*time.Second {
		t.Errorf("the error reply came after %v, at the deadline: the duplicate passed silently", l)
	}
	if st := f.Stats(); st.Accepted != 0 || st.Refused != 1 {
		t.Errorf("stats %+v, want 1 refused", st)
	}
}

// TestStalledJetStreamRefusesOverload: the task subjects have a listener that never acknowledges, as a stalled
// JetStream. Publishes end at their request's deadline, counted from its arrival (not from when the intake took it);
// once the intake is full, further requests are refused at once as overloaded (HTTP: 429 with Retry-After); every
// request gets exactly one reply (issue 25, item 4).
func TestStalledJetStreamRefusesOverload(t *testing.T) {
	s := startTestSystem(t, 0)
	const workers, queue = 2, 4
	f, _ := s.startFrontend(t, Config{ID: "fe", IntakeWorkers: workers, IntakeQueue: queue})
	admin := s.connect(t, "admin")
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(context.Background(), wire.TaskStream(s.spec.Name)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Subscribe(wire.TaskSubjects(s.spec.Name), func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	admin.Flush()
	srv := httptest.NewServer(f.Handler())
	defer srv.Close()

	// The flood must be taken in before the first deadlines free the intake's places (slow under -race).
	const n, timeout = 50, 2 * time.Second
	c := s.newClient(t)
	var subjects []string
	for i := 0; i < n; i++ {
		subjects = append(subjects, c.Send(t, s.spec.Name, goodRequest(t), nats.Header{wire.HeaderTimeout: []string{timeout.String()}}))
	}
	// Once the intake is full (the first publishes wait for an acknowledgement until their deadline), so is it for
	// HTTP requests.
	if err := testrig.WaitFor(5*time.Second, fmt.Sprintf("%d requests refused as overloaded", n-workers-queue),
		func() bool { return f.Stats().Overloaded >= n-workers-queue }); err != nil {
		t.Fatalf("%v: %d are", err, f.Stats().Overloaded)
	}
	resp, err := http.Post(srv.URL+"/v2/models/"+s.spec.Name+"/infer", wire.ContentJSON,
		strings.NewReader(`{"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 1.5]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(wire.HeaderRetryAfter) == "" ||
		!strings.Contains(string(body), "overloaded") {
		t.Errorf("HTTP request to a full frontend: %d, %s %q, %s; want 429 with %s and an error saying overloaded",
			resp.StatusCode, wire.HeaderRetryAfter, resp.Header.Get(wire.HeaderRetryAfter), body, wire.HeaderRetryAfter)
	}

	replies := c.Wait(t, subjects, 5*time.Second)
	c.ExpectOneReply(t, subjects, 200*time.Millisecond)
	overloaded, late, atOnce := 0, 0, 0
	var worst time.Duration
	for _, subj := range subjects {
		rep := decodeReply(t, replies[subj][0])
		switch {
		case rep.Status == wire.StatusOverloaded && strings.Contains(rep.Error, "overloaded"):
			overloaded++
		case rep.Status == wire.StatusLate:
			late++
		default:
			t.Errorf("reply %q %q, want late or overloaded", rep.Status, rep.Error)
		}
		worst = max(worst, c.Latency(subj))
		if c.Latency(subj) < timeout/2 {
			atOnce++
		}
	}
	// Those the intake had no room for are refused at once, not after queueing.
	if atOnce < n-workers-queue {
		t.Errorf("%d replies came at once, want at least the %d the intake had no room for", atOnce, n-workers-queue)
	}
	if overloaded < n-workers-queue || overloaded+late != n {
		t.Errorf("%d overloaded and %d late of %d, want at least %d overloaded", overloaded, late, n, n-workers-queue)
	}
	// Those that waited in the intake are answered at their deadline from arrival, not a timeout after they left it
	// (2 timeouts); the bound leaves room for a busy machine.
	if worst > timeout+600*time.Millisecond {
		t.Errorf("slowest reply after %v, want about %v", worst, timeout)
	}
	if st := f.Stats(); st.Overloaded != uint64(overloaded+1) || st.Refused != st.Overloaded {
		t.Errorf("stats %+v, want %d overloaded (one over HTTP), all of the refused", st, overloaded+1)
	}
}

// TestShutdownWithStalledJetStream stops a frontend whose publishes hang (a listener that never acknowledges): Run
// gives up on them after its grace period, and every request, in flight or waiting in the intake, gets one error
// reply, instead of the shutdown waiting out their deadlines.
func TestShutdownWithStalledJetStream(t *testing.T) {
	defer func(g time.Duration) { shutdownGrace = g }(shutdownGrace)
	shutdownGrace = 300 * time.Millisecond
	s := startTestSystem(t, 0)
	f, stop := s.startFrontend(t, Config{ID: "fe", IntakeWorkers: 2, IntakeQueue: 4})
	admin := s.connect(t, "admin")
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(context.Background(), wire.TaskStream(s.spec.Name)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Subscribe(wire.TaskSubjects(s.spec.Name), func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	admin.Flush()
	c := s.newClient(t)
	var subjects []string
	for i := 0; i < 6; i++ {
		subjects = append(subjects, c.Send(t, s.spec.Name, goodRequest(t), nats.Header{wire.HeaderTimeout: []string{"30s"}}))
	}
	c.Conn().Flush()
	testrig.Eventually(t, 5*time.Second, "2 requests in flight and 4 waiting in the intake", func() bool {
		return len(f.intake.jobs) == 4
	})
	start := time.Now()
	stop()
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the frontend took %v to stop", took)
	}
	replies := c.Wait(t, subjects, 3*time.Second)
	for _, subj := range subjects {
		if n := len(replies[subj]); n != 1 {
			t.Errorf("%d replies, want 1", n)
		}
		if rep := decodeReply(t, replies[subj][0]); rep.Status != wire.StatusError || !strings.Contains(rep.Error, "shutting down") {
			t.Errorf("reply %q %q, want an error saying the frontend is shutting down", rep.Status, rep.Error)
		}
	}
	if st := f.Stats(); st.Refused != 6 {
		t.Errorf("stats %+v, want 6 refused", st)
	}
}

// TestRequestsAreEnqueuedInArrivalOrder: the intake decodes and publishes concurrently, but each variant's queue must
// still hold the requests in the order they arrived (the deadline policies and FIFO fairness rely on it).
func TestRequestsAreEnqueuedInArrivalOrder(t *testing.T) {
	s := startTestSystem(t, 0)
	s.startFrontend(t, Config{ID: "fe", IntakeWorkers: 8})
	c := s.newClient(t)
	const n = 300
	var subjects []string
	for i := 0; i < n; i++ {
		data, err := msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{wire.NewFP32("image", []int64{1, 1}, []float32{float32(i)})}})
		if err != nil {
			t.Fatal(err)
		}
		subjects = append(subjects, c.Send(t, s.spec.Name, data, nats.Header{wire.HeaderTimeout: []string{"30s"}}))
	}
	js, err := jetstream.New(s.connect(t, "reader"))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(context.Background(), wire.TaskStream(s.spec.Name))
	if err != nil {
		t.Fatal(err)
	}
	var info *jetstream.StreamInfo
	if err := testrig.WaitFor(10*time.Second, fmt.Sprintf("%d requests in the stream", n), func() bool {
		if info, err = stream.Info(context.Background()); err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs == n
	}); err != nil {
		t.Fatalf("%v: %d are", err, info.State.Msgs)
	}
	var got []int
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		var tm wire.TaskMessage
		if err := msgpack.Unmarshal(m.Data, &tm); err != nil {
			t.Fatal(err)
		}
		v, err := tm.Items[0].Inputs[0].FP32()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, int(v[0]))
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("the stream holds the requests in the order %v, want 0..%d", got, n-1)
		}
	}
}

// TestDemandWithheldAcrossAReconnect: the demand report whose interval spans a lost connection is not sent (what a
// frontend counts while its clients cannot reach it is not the demand: the planner shrank the plan on it after every
// server restart), and reports resume after it.
func TestDemandWithheldAcrossAReconnect(t *testing.T) {
	s := startTestSystem(t, 0)
	f, _ := s.startFrontend(t, Config{ID: "fe", DemandEvery: 50 * time.Millisecond})
	reports, err := s.connect(t, "planner-side").SubscribeSync(wire.DemandSubject(s.spec.Name))
	if err != nil {
		t.Fatal(err)
	}
	next := func() {
		t.Helper()
		if _, err := reports.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("no demand report: %v", err)
		}
	}
	next()
	if err := f.nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	testrig.Eventually(t, 5*time.Second, "a demand report withheld after a reconnect", func() bool {
		return f.Stats().DemandWithheld > 0
	})
	// Those sent meanwhile are drained; reports go on.
	for n, _, _ := reports.Pending(); n > 0; n-- {
		next()
	}
	next()
}

// TestDemandReportCarriesGaps: the frontend's demand reports carry the gaps between the requests it accepted (the
// plan check's arrivals): one before each request but the first, the newest wire.MaxDemandGaps of a report, and
// together no longer than the requests took.
func TestDemandReportCarriesGaps(t *testing.T) {
	s := startTestSystem(t, 0)
	s.startFrontend(t, Config{ID: "fe", DemandEvery: 50 * time.Millisecond})
	reports, err := s.connect(t, "planner-side").SubscribeSync(wire.DemandSubject(s.spec.Name))
	if err != nil {
		t.Fatal(err)
	}
	c := s.newClient(t)
	const n = 200
	start := time.Now()
	for range n {
		c.Send(t, s.spec.Name, goodRequest(t), nats.Header{wire.HeaderTimeout: []string{"30s"}})
	}
	accepted, gaps := 0, 0
	var spanned float64
	for accepted < n {
		m, err := reports.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("%d of %d requests reported: %v", accepted, n, err)
		}
		var r wire.DemandReport
		if err := wire.UnmarshalMsgpack(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		g, err := r.Gaps()
		want := r.Count // a gap before each request, but the first
		if accepted == 0 && want > 0 {
			want--
		}
		if err != nil || len(g) != min(want, wire.MaxDemandGaps) {
			t.Fatalf("report of %d requests with %d gaps (%v), want %d", r.Count, len(g), err,
				min(want, wire.MaxDemandGaps))
		}
		accepted += r.Count
		gaps += len(g)
		for _, x := range g {
			spanned += float64(x)
		}
	}
	if took := float64(time.Since(start).Milliseconds()) + 1; gaps == 0 || spanned > took {
		t.Errorf("the gaps span %.1f ms, the requests took %.0f ms", spanned, took)
	}
}
