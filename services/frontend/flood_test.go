package frontend

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// floodClient sends requests open-loop and keeps, per request, only what the flood test checks (how many replies,
// the first one's kind and latency): testrig.Client keeps every reply, which would weigh in the heap the test bounds.
type floodClient struct {
	nc     *nats.Conn
	prefix string

	mu      sync.Mutex
	sent    []time.Time
	replies []uint8
	kind    []uint8 // of the first reply
	latency []time.Duration
}

// Kinds of reply.
const (
	replyNone     = iota
	replyOK       // ok
	replyAccepted // partial, dropped or late: the request went into the pipeline
	replyRefused  // overloaded
	replyOther    // any other error
)

func newFloodClient(t *testing.T, nc *nats.Conn) *floodClient {
	c := &floodClient{nc: nc, prefix: nats.NewInbox()}
	sub, err := nc.Subscribe(c.prefix+".*", c.onReply)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1) // the test's own client must see every reply
	return c
}

func (c *floodClient) onReply(m *nats.Msg) {
	now := time.Now()
	i, err := strconv.Atoi(m.Subject[len(c.prefix)+1:])
	kind := uint8(replyAccepted)
	switch e := m.Header.Get(wire.HeaderError); {
	case strings.Contains(e, "overloaded"):
		kind = replyRefused
	case e != "":
		kind = replyOther
	default:
		var rep wire.InferReply
		if wire.UnmarshalMsgpack(m.Data, &rep) == nil && rep.Status == wire.StatusOK {
			kind = replyOK
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil || i >= len(c.sent) {
		return
	}
	if c.replies[i] == 0 {
		c.kind[i], c.latency[i] = kind, now.Sub(c.sent[i])
	}
	c.replies[i]++
}

func (c *floodClient) send(t *testing.T, pipeline string, data []byte) {
	m := nats.NewMsg(wire.InferSubject(pipeline))
	m.Data = data
	c.mu.Lock()
	m.Reply = fmt.Sprintf("%s.%d", c.prefix, len(c.sent))
	c.sent = append(c.sent, time.Now())
	c.replies, c.kind, c.latency = append(c.replies, 0), append(c.kind, replyNone), append(c.latency, 0)
	c.mu.Unlock()
	if err := c.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
}

// settle waits until every request is answered, or was dropped unanswered over f's pending limits (counted), and
// then for a second reply, which would come within a deadline.
func (c *floodClient) settle(t *testing.T, f *Frontend, deadline time.Duration) {
	settled := func() bool { return c.counts().unanswered == int(f.Stats().DroppedRequests) }
	if err := testrig.WaitFor(30*time.Second, "every request answered or counted as dropped", settled); err != nil {
		t.Errorf("%v: %+v, stats %+v", err, c.counts(), f.Stats())
	}
	testrig.Consistently(t, deadline, "no request answered twice", func() bool { return c.counts().twice == 0 })
}

// floodCounts are what became of the requests sent.
type floodCounts struct {
	sent, ok, accepted, refused, other, unanswered, twice int
	// Latencies of the first replies of the requests refused and accepted, sorted.
	refusalLatency, acceptedLatency []time.Duration
}

func (c *floodClient) counts() floodCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := floodCounts{sent: len(c.sent)}
	for i, k := range c.kind {
		switch k {
		case replyNone:
			n.unanswered++
		case replyOK, replyAccepted:
			if k == replyOK {
				n.ok++
			}
			n.accepted++
			n.acceptedLatency = append(n.acceptedLatency, c.latency[i])
		case replyRefused:
			n.refused++
			n.refusalLatency = append(n.refusalLatency, c.latency[i])
		default:
			n.other++
		}
		if c.replies[i] > 1 {
			n.twice++
		}
	}
	slices.Sort(n.refusalLatency)
	slices.Sort(n.acceptedLatency)
	return n
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

// liveHeap is the heap in use after a collection: what the process holds, not what the collector has yet to free.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// floodDuration is how long TestFlood floods: 3 s in `make test`, SLEIPNIR_FLOOD (make flood: 20 s) to measure.
func floodDuration(t *testing.T) time.Duration {
	if s := os.Getenv("SLEIPNIR_FLOOD"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SLEIPNIR_FLOOD=%q: %v", s, err)
		}
		return d
	}
	return 3 * time.Second
}

// Bounds TestFlood states. The frontend holds at most floodInFlight requests; the live heap of the whole test
// process (the server, the planner, the workers, the frontend and the client) grows by at most floodHeapBound while
// flooded. The flood is at most floodMaxRate requests a second, whatever the machine: it shares it.
const (
	floodInFlight  = 4
	floodHeapBound = 32 << 20
	floodMaxRate   = 1000
)

// TestFlood sends a real frontend, on a real JetStream server with ten emulated workers, ten times what its intake
// admits (floodInFlight requests at a time, at the latency measured first) for floodDuration, over NATS,
// with HTTP requests beside them (429 with Retry-After). Refusals happen and publish nothing; every accepted request
// gets exactly one reply; the frontend never holds more than its limit; the heap stays within floodHeapBound of
// where it started.
func TestFlood(t *testing.T) {
	s := startTestSystem(t, 10)
	f, _ := s.startFrontend(t, Config{ID: "fe", MaxInFlight: floodInFlight}) // the intake's defaults: 32 and 1024
	srv := httptest.NewServer(f.Handler())
	defer srv.Close()
	c := newFloodClient(t, s.connect(t, "flood"))
	published := watchRootTasks(t, s)
	req := goodRequest(t)
	slo := time.Duration(s.spec.SLOMs * float64(time.Millisecond))
	duration := floodDuration(t)
	// The intake: floodInFlight clients, each sending its next request once answered, for 2 s (after a warm-up).
	measureIntake(t, s, req, time.Second)
	intake := measureIntake(t, s, req, 2*time.Second)
	// At least ten times what the intake admits if each request takes its whole deadline.
	rate := min(max(10*intake, 10*floodInFlight/slo.Seconds()), floodMaxRate)
	before, measured, measuredTasks := liveHeap(), f.Stats(), published()

	probe := startFloodProbe(t, srv.URL, s.spec.Name)
	var peakInFlight int64
	start, sent := time.Now(), 0
	tick := time.NewTicker(10 * time.Millisecond)
	for now := start; now.Sub(start) < duration; now = <-tick.C {
		for target := int(rate * now.Sub(start).Seconds()); sent < target; sent++ {
			c.send(t, s.spec.Name, req)
		}
		peakInFlight = max(peakInFlight, f.Stats().InFlight)
	}
	tick.Stop()
	flooded := time.Since(start)
	probe.stop()

	c.settle(t, f, slo)
	n, st := c.counts(), f.Stats()
	// What the flood did: the intake's measurement is not in the client's counts.
	st.Accepted -= measured.Accepted
	st.Replied -= measured.Replied
	t.Logf("intake %.0f requests/s (%d in flight); flood of %v at %.0f requests/s (%.0f sent/s), SLO %v: %s; "+
		"in flight at most %d; live heap %.1f MiB before, %.1f MiB at most while flooded (+%.1f MiB); HTTP: %d of %d "+
		"refused with 429 and Retry-After", intake, floodInFlight, flooded.Round(time.Millisecond), rate,
		float64(sent)/flooded.Seconds(), slo, n.summary(st.DroppedRequests), peakInFlight, mib(before),
		mib(probe.peakHeap), mib(probe.peakHeap)-mib(before), probe.http429,
		probe.http429+probe.httpAccepted+len(probe.httpOther))

	if n.refused < n.sent/2 {
		t.Errorf("%d of %d requests refused, want at least half: the flood is ten times the intake", n.refused, n.sent)
	}
	if st.DroppedRequests > uint64(n.sent/10) {
		t.Errorf("%d of %d requests dropped unanswered, want refusals rather (at most a tenth)", st.DroppedRequests, n.sent)
	}
	if n.twice > 0 || n.other > 0 {
		t.Errorf("%d requests got more than one reply, %d an error other than overloaded", n.twice, n.other)
	}
	// Replied counts the replies of requests that entered the pipeline (some publishes outlast their deadline on a
	// busy machine: those are answered late, and not counted as accepted).
	if uint64(n.accepted+probe.httpAccepted) != st.Replied || st.Replied < st.Accepted {
		t.Errorf("%d replies to accepted requests (%d over HTTP), the frontend replied to %d, accepted %d: requests lost",
			n.accepted+probe.httpAccepted, probe.httpAccepted, st.Replied, st.Accepted)
	}
	if peakInFlight > floodInFlight || st.InFlight != 0 {
		t.Errorf("%d requests in flight at most, %d at the end, want at most %d, then 0", peakInFlight, st.InFlight,
			floodInFlight)
	}
	if probe.peakHeap > before+floodHeapBound {
		t.Errorf("live heap grew from %.1f to %.1f MiB while flooded, want at most %.0f MiB more", mib(before),
			mib(probe.peakHeap), mib(floodHeapBound))
	}
	// Refusals cost no publish, and so no model time: only the requests that entered the pipeline have a root task
	// message (those whose publish outlasted their deadline may or may not). Their latency is reported, not bounded:
	// on a machine as busy as CI's, this process may take seconds to read its replies.
	if p := published() - measuredTasks; p < st.Accepted || p > st.Replied {
		t.Errorf("%d requests have a root task message, want from the %d accepted to the %d answered: refusals "+
			"published", p, st.Accepted, st.Replied)
	}
	if probe.http429 == 0 || len(probe.httpOther) > 0 {
		t.Errorf("HTTP requests during the flood: %d refused with 429 and Retry-After, %d accepted, others %v",
			probe.http429, probe.httpAccepted, probe.httpOther)
	}
}

// summary says what became of the requests, with dropped the frontend's count of those dropped unanswered.
func (n floodCounts) summary(dropped uint64) string {
	ms := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
	return fmt.Sprintf("sent %d, accepted %d, ok %d, refused %d, dropped unanswered %d; refusal latency p50 %s p99 %s "+
		"max %s (accepted: p50 %s)", n.sent, n.accepted, n.ok, n.refused, dropped, ms(quantile(n.refusalLatency, .5)),
		ms(quantile(n.refusalLatency, .99)), ms(quantile(n.refusalLatency, 1)), ms(quantile(n.acceptedLatency, .5)))
}

// floodProbe runs beside a flood: it samples the live heap once a second, and sends HTTP requests one after
// another, 100 ms apart. Read its fields after stop.
type floodProbe struct {
	peakHeap              uint64
	http429, httpAccepted int
	httpOther             []string
	done                  chan struct{}
	running               sync.WaitGroup
}

func startFloodProbe(t *testing.T, url, pipeline string) *floodProbe {
	p := &floodProbe{done: make(chan struct{})}
	p.running.Go(func() {
		for tick := time.NewTicker(time.Second); ; {
			select {
			case <-p.done:
				tick.Stop()
				return
			case <-tick.C:
				p.peakHeap = max(p.peakHeap, liveHeap())
			}
		}
	})
	p.running.Go(func() {
		for {
			select {
			case <-p.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			code, retry := floodHTTP(t, url, pipeline)
			switch {
			case code == http.StatusTooManyRequests && retry != "":
				p.http429++
			case code == http.StatusOK || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
				p.httpAccepted++ // ok, partial or dropped, late
			default:
				p.httpOther = append(p.httpOther, fmt.Sprintf("%d (Retry-After %q)", code, retry))
			}
		}
	})
	return p
}

// stop ends the probe, with a last sample of the heap as the flood ends.
func (p *floodProbe) stop() {
	close(p.done)
	p.running.Wait()
	p.peakHeap = max(p.peakHeap, liveHeap())
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// floodHTTP sends one HTTP inference request and returns its status and Retry-After.
func floodHTTP(t *testing.T, url, pipeline string) (int, string) {
	resp, err := http.Post(url+"/v2/models/"+pipeline+"/infer", wire.ContentJSON,
		strings.NewReader(`{"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 1.5]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get(wire.HeaderRetryAfter)
}

// TestStalledCallbackHoldsItsBacklog: while the request callback is stalled (here: the intake's lock held), at most
// RequestBacklog requests wait for it; the rest are dropped and counted. Once it resumes, each request kept gets its
// one reply.
func TestStalledCallbackHoldsItsBacklog(t *testing.T) {
	s := startTestSystem(t, 0)
	const backlog, sent = 16, 200
	f, _ := s.startFrontend(t, Config{ID: "fe", RequestBacklog: backlog, MaxInFlight: 1})
	c := newFloodClient(t, s.connect(t, "flood"))
	f.intake.mu.Lock()
	for range sent {
		c.send(t, s.spec.Name, goodRequest(t))
	}
	err := testrig.WaitFor(10*time.Second, "the requests over the backlog dropped", func() bool {
		return f.Stats().DroppedRequests == sent-backlog
	})
	f.intake.mu.Unlock()
	if err != nil {
		t.Fatalf("%v: %d dropped of %d sent to a stalled callback with a backlog of %d", err,
			f.Stats().DroppedRequests, sent, backlog)
	}
	testrig.Eventually(t, 10*time.Second, "a reply to each request kept", func() bool {
		return c.counts().unanswered == sent-backlog
	})
	time.Sleep(100 * time.Millisecond) // a second reply would be here by now
	if n := c.counts(); n.twice > 0 || n.accepted+n.refused != backlog {
		t.Errorf("%+v, want one reply each to the %d requests kept", n, backlog)
	}
	if st := f.Stats(); st.DroppedResults != 0 || st.DroppedControl != 0 {
		t.Errorf("stats %+v: drops from the result or micro subscriptions", st)
	}
}

// measureIntake is the rate at which the frontend answers floodInFlight clients that each send a request, wait for
// its reply and send the next, for d.
func measureIntake(t *testing.T, s *testSystem, req []byte, d time.Duration) float64 {
	nc := s.connect(t, "intake")
	defer nc.Close()
	var answered atomic.Int64
	var clients sync.WaitGroup
	start := time.Now()
	for range floodInFlight {
		clients.Go(func() {
			for time.Since(start) < d {
				// A refusal (on a machine so busy that a request waited past its deadline) does not count.
				m, err := nc.Request(wire.InferSubject(s.spec.Name), req, 10*time.Second)
				if err == nil && m.Header.Get(wire.HeaderError) == "" {
					answered.Add(1)
				}
			}
		})
	}
	clients.Wait()
	return float64(answered.Load()) / time.Since(start).Seconds()
}

// watchRootTasks counts the requests that have a task message on the root task's subjects (by message id).
func watchRootTasks(t *testing.T, s *testSystem) func() uint64 {
	var mu sync.Mutex
	ids := map[string]bool{}
	nc := s.connect(t, "watch")
	sub, err := nc.Subscribe(wire.TaskSubject(s.spec.Name, s.spec.Root().Name, "*"), func(m *nats.Msg) {
		mu.Lock()
		ids[m.Header.Get(wire.HeaderMsgID)] = true
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1) // the test's own: it must see every one
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return uint64(len(ids))
	}
}
