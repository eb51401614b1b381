package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// Config is one load run.
type Config struct {
	Pipeline string
	QPS      float64
	Duration time.Duration
	// Timeout, if set, makes each request's deadline, sent as an absolute time (wire.HeaderDeadline) from when it is
	// first sent; otherwise the frontend applies the SLO.
	Timeout time.Duration
	// Grace is how long past its deadline a request may go unanswered before it counts as lost.
	Grace time.Duration
	// Warmup is sent at the same rate before Duration, but not counted: it lets the demand estimate and the routing
	// settle, as measurements of a steady state need.
	Warmup     time.Duration
	InputShape []int64
	Seed       uint64
	// Images, if set, is a labelled OCR set: each request carries one of its images (in turn), and each ok reply is
	// checked against the image's ground truth.
	Images *ocr.Set
	// Series, if set, adds to the summary the fate of the measured requests per second of sending (what a fault
	// suite reads recovery times from).
	Series bool
	// NoRetry turns off what a client should do to lose nothing (see resend): resending after a reconnect the
	// requests unanswered when the connection dropped, and retrying "no responders".
	NoRetry bool
	// Workload, if set, gives the arrivals instead of QPS and Duration: the simulator's workloads (pkg/workload,
	// such as steps:100:30s,600:30s), sent live after Warmup at its first rate.
	Workload *workload.Workload
}

// noDeadlineWait is how long a request without a known deadline may take before its grace starts.
const noDeadlineWait = 30 * time.Second

// duplicateWait is how long a run listens, after the last request is settled, for duplicate replies.
const duplicateWait = 500 * time.Millisecond

// pendingReq is one request of the client's, however many attempts (publishes, each on its own reply subject) it
// takes.
type pendingReq struct {
	sent     time.Time // its first attempt
	deadline time.Time // absolute; zero if the frontend applies the SLO
	retryEnd time.Time // no attempt is sent after this: the deadline (or noDeadlineRetry after the first), or
	// reconnectRetry after a reconnect that resent it
	due       time.Time // lost after this
	warmup    bool      // sent during the warmup: not counted
	doc       int       // the labelled image the request carries
	second    int       // index in the series (measured requests only)
	sinceMs   int64     // ms from the series' start
	attempts  int
	lastSent  time.Time     // its latest attempt
	resent    bool          // sent again after a reconnect (once only)
	retryWait time.Duration // the wait before the next attempt after "no responders"
	answered  bool          // its outcome is in: a reply, or a failed publish
	lost      bool
}

// settled: answered, or counted lost.
func (p *pendingReq) settled() bool { return p.answered || p.lost }

// attempt is one publish of a request.
type attempt struct {
	req     *pendingReq
	replies int
}

type run struct {
	nc       *nats.Conn
	subject  string
	inbox    string
	payloads [][]byte
	noRetry  bool

	mu sync.Mutex
	// attempts holds every attempt sent, by reply subject, answered or not, so that a second reply to one is seen
	// as a duplicate.
	attempts    map[string]*attempt
	requests    []*pendingReq
	nextAttempt int
	// disconnectedAt is when the connection dropped, until the reconnect that resends what it left unanswered.
	disconnectedAt time.Time
	done           bool // the run is over: no more attempts
	series         []Second
	latencies      []float64 // of the replies to accepted requests
	refusedLat     []float64 // of the refusals (status overloaded)
	sum            Summary
	noResp         int // requests answered "no responders" (after their retries)
	accSum         float64
	accN           int
	images         *ocr.Set
	truth          ocrTally
}

// ocrTally adds up how the ok replies read their labelled images.
type ocrTally struct {
	exact, lines int
	predicted    float64 // profiled accuracy times true lines
	pageChars    float64
	pages        int
}

// Run sends open-loop Poisson arrivals for cfg.Duration, then waits for every reply or its loss.
func Run(ctx context.Context, nc *nats.Conn, cfg Config, progress io.Writer) (Summary, error) {
	cfg, arrivals, err := withDefaults(cfg)
	if err != nil {
		return Summary{}, err
	}
	// One generator draws the input values, then the arrivals: a seed gives the same run.
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x10ad))
	payloads, err := requestPayloads(cfg, rng)
	if err != nil {
		return Summary{}, err
	}

	// Under the connection's inbox prefix (--inbox-prefix), the only one its NATS user may read.
	r := &run{nc: nc, subject: wire.InferSubject(cfg.Pipeline), inbox: nc.NewInbox(), payloads: payloads,
		noRetry: cfg.NoRetry, attempts: map[string]*attempt{},
		sum: Summary{Pipeline: cfg.Pipeline, QPS: cfg.QPS}, images: cfg.Images}
	sub, err := subscribeInbox(nc, r.inbox+".*", r.onReply)
	if err != nil {
		return Summary{}, err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	if !cfg.NoRetry {
		defer r.resendOnReconnect(nc)()
	}

	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	progressDone.Add(1)
	start := time.Now()
	if progress != nil && cfg.Warmup > 0 {
		fmt.Fprintf(progress, "warming up for %v at %g QPS (sent, not measured), then measuring for %v\n",
			cfg.Warmup, cfg.QPS, cfg.Duration)
	}
	go func() {
		defer progressDone.Done()
		r.report(progress, start, cfg.Warmup, stopProgress)
	}()

	sendEnd, measureStart := r.send(ctx, cfg, arrivals, rng, start)
	r.drain()
	time.Sleep(duplicateWait)
	close(stopProgress)
	progressDone.Wait()
	if measureStart.IsZero() {
		measureStart = start
	}
	return r.summarize(cfg, sendEnd, measureStart)
}

// withDefaults checks cfg and fills in its defaults; with a workload, its duration and mean rate replace
// cfg.Duration and cfg.QPS, and its arrivals are returned (nil: Poisson at cfg.QPS).
func withDefaults(cfg Config) (Config, *workload.Arrivals, error) {
	var arrivals *workload.Arrivals
	if w := cfg.Workload; w != nil {
		if err := w.Validate(); err != nil {
			return cfg, nil, err
		}
		cfg.Duration = w.Duration()
		cfg.QPS = 0
		for _, r := range w.Rates {
			cfg.QPS += r / float64(len(w.Rates))
		}
		arrivals = w.Arrivals(cfg.Seed)
	}
	if cfg.QPS <= 0 || cfg.Duration <= 0 {
		return cfg, nil, errors.New("--qps and --duration must be positive")
	}
	if cfg.Grace == 0 {
		cfg.Grace = 5 * time.Second
	}
	if len(cfg.InputShape) == 0 {
		cfg.InputShape = []int64{64, 192}
	}
	return cfg, arrivals, nil
}

// send sends the requests, the warmup's then the measured ones, until cfg's time is up or ctx ends. It returns
// when the last was sent and when the measurement began (zero if it never did).
func (r *run) send(ctx context.Context, cfg Config, arrivals *workload.Arrivals, rng *rand.Rand,
	start time.Time) (sendEnd, measureStart time.Time) {
	sched := schedule{cfg: cfg, arrivals: arrivals, rng: rng, start: start, next: start}
	for i := 0; ; i++ {
		next, more := sched.advance()
		if !more {
			break
		}
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		now := time.Now()
		warm := now.Sub(start) < cfg.Warmup
		if !warm && measureStart.IsZero() {
			measureStart = now
		}
		p, m := r.newRequest(cfg, i, now, warm, measureStart)
		r.publish(p, m)
		sendEnd = time.Now()
	}
	if sendEnd.IsZero() {
		sendEnd = time.Now()
	}
	return sendEnd, measureStart
}

// schedule is when Run sends its requests: the arrivals drawn from its generator after the input values.
type schedule struct {
	cfg         Config
	arrivals    *workload.Arrivals
	rng         *rand.Rand
	start, next time.Time
}

// advance returns when the next request is due; false when the run's time is up or its workload is over.
func (s *schedule) advance() (time.Time, bool) {
	next, more := nextArrival(s.cfg, s.arrivals, s.rng, s.start, s.next)
	if !more || next.Sub(s.start) >= s.cfg.Warmup+s.cfg.Duration {
		return s.next, false
	}
	s.next = next
	return next, true
}

// Schedule is the times since its start at which Run sends cfg's requests, the warmup's included, as drawn (Run
// sends a request late when it cannot keep up): a seed gives the same times. The fidelity check simulates them.
func Schedule(cfg Config) ([]time.Duration, error) {
	cfg, arrivals, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x10ad))
	if _, err := requestPayloads(cfg, rng); err != nil {
		return nil, err
	}
	var start time.Time
	sched := schedule{cfg: cfg, arrivals: arrivals, rng: rng, start: start, next: start}
	var times []time.Duration
	for {
		next, more := sched.advance()
		if !more {
			return times, nil
		}
		times = append(times, next.Sub(start))
	}
}

// nextArrival is when the request after the one at prev is due: the workload's next arrival once its warmup is
// over, else an exponential gap at cfg.QPS (or at the workload's first rate during its warmup). False: the
// workload has no more arrivals.
func nextArrival(cfg Config, arrivals *workload.Arrivals, rng *rand.Rand, start, prev time.Time) (time.Time, bool) {
	if arrivals != nil && prev.Sub(start) >= cfg.Warmup {
		at, ok := arrivals.Next()
		if !ok {
			return prev, false
		}
		return start.Add(cfg.Warmup + at), true
	}
	rate := cfg.QPS
	if arrivals != nil { // its warmup, at its first rate
		rate = cfg.Workload.Rates[0]
	}
	return prev.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second))), true
}

// newRequest records the i-th request, sent now, and makes its first attempt.
func (r *run) newRequest(cfg Config, i int, now time.Time, warm bool, measureStart time.Time) (*pendingReq, *nats.Msg) {
	p := &pendingReq{sent: now, warmup: warm, doc: i % len(r.payloads), retryEnd: now.Add(noDeadlineRetry)}
	wait := noDeadlineWait
	if cfg.Timeout > 0 {
		p.deadline, p.retryEnd, wait = now.Add(cfg.Timeout), now.Add(cfg.Timeout), cfg.Timeout
	}
	p.due = now.Add(wait + cfg.Grace)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, p)
	if !warm {
		r.sum.Sent++
		p.second = int(now.Sub(measureStart) / time.Second)
		p.sinceMs = now.Sub(measureStart).Milliseconds()
		for len(r.series) <= p.second {
			r.series = append(r.series, Second{})
		}
		r.series[p.second].Sent++
	}
	return p, r.attemptLocked(p, now)
}

// drain waits for every reply, or until each outstanding request is past its loss time; then no more attempts
// are made.
func (r *run) drain() {
	for {
		r.mu.Lock()
		now, left := time.Now(), 0
		for _, p := range r.requests {
			if p.settled() {
				continue
			}
			if now.After(p.due) {
				r.loseLocked(p)
			} else {
				left++
			}
		}
		if left == 0 {
			r.done = true
		}
		r.mu.Unlock()
		if left == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// attemptLocked makes the next attempt of p, on a reply subject of its own: a reply names the attempt it answers,
// so a second reply to one attempt is a duplicate, and a reply to another attempt of an answered request is not.
// Every attempt carries the request's absolute deadline (wire.HeaderDeadline; the client's and the frontend's clocks
// must agree, as synchronised clocks do to within milliseconds): a relative timeout would start afresh at each
// arrival, for a further attempt and for an attempt held in the client's reconnect buffer alike.
func (r *run) attemptLocked(p *pendingReq, now time.Time) *nats.Msg {
	m := nats.NewMsg(r.subject)
	m.Reply = r.inbox + "." + strconv.Itoa(r.nextAttempt)
	r.nextAttempt++
	m.Data = r.payloads[p.doc]
	m.Header.Set(wire.HeaderContentType, wire.ContentMsgpack)
	if !p.deadline.IsZero() {
		m.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(p.deadline))
	}
	p.attempts++
	p.lastSent = now
	r.attempts[m.Reply] = &attempt{req: p}
	return m
}

// publish sends an attempt; if that fails, the failure is the request's outcome.
func (r *run) publish(p *pendingReq, m *nats.Msg) {
	err := r.nc.PublishMsg(m)
	if err == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.settled() {
		return
	}
	p.answered = true
	if !p.warmup {
		r.series[p.second].Violations++
		r.sum.Errors++
		if r.sum.FirstError == "" {
			r.sum.FirstError = err.Error()
		}
	}
}
