package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

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

// Summary is the result of a run; its JSON form is loadgen's last line with --json.
type Summary struct {
	Pipeline  string  `json:"pipeline"`
	QPS       float64 `json:"qps"`
	DurationS float64 `json:"duration_s"`
	Sent      int     `json:"sent"`
	OK        int     `json:"ok"`
	Partial   int     `json:"partial"`
	Dropped   int     `json:"dropped"`
	Late      int     `json:"late"`
	Errors    int     `json:"errors"`
	// Refused counts the replies with status overloaded: requests the system refused at once, before they cost
	// model time (admission control, the frontend's bounds). RefusedP99Ms is the 99th percentile of their latency.
	Refused      int     `json:"refused"`
	RefusedP99Ms float64 `json:"refused_p99_ms"`
	Lost         int     `json:"lost"`
	// Duplicates counts replies beyond the first to one attempt of a request (each one a broken exactly-once
	// promise); LateReplies, replies that came after their request was counted lost. Neither changes the request's
	// own outcome.
	Duplicates  int `json:"duplicates"`
	LateReplies int `json:"late_replies"`
	// Resent counts the attempts sent after a reconnect for requests unanswered when the connection dropped;
	// Retried, those sent after a "no responders" answer; ExtraReplies, replies to an attempt of a request that
	// another of its attempts had already answered (the work was done twice, the client told once: no fault).
	Resent       int `json:"resent"`
	Retried      int `json:"retried"`
	ExtraReplies int `json:"extra_replies"`
	// P50Ms .. MeanLatencyMs are the latencies of the replies to the requests the system accepted (every status
	// but overloaded).
	P50Ms             float64 `json:"p50_ms"`
	P95Ms             float64 `json:"p95_ms"`
	P99Ms             float64 `json:"p99_ms"`
	MeanLatencyMs     float64 `json:"mean_latency_ms"`
	SLOViolationRatio float64 `json:"slo_violation_ratio"`
	// AcceptedViolationRatio is the violations among the requests the system accepted: those not refused, whose
	// reply is not ok (lost ones included), over the requests sent less the refused.
	AcceptedViolationRatio float64 `json:"accepted_violation_ratio"`
	AchievedQPS            float64 `json:"achieved_qps"`
	// MeanAccuracy is the mean profiled end-to-end accuracy of the ok and partial replies (the reply's accuracy).
	MeanAccuracy float64 `json:"mean_accuracy"`
	// With a labelled set (--images), over the ok replies: the share of true lines found and read exactly (what
	// was served), the same as the profile predicts it (each reply's profiled accuracy, weighted by its true lines),
	// and the mean character accuracy of whole pages.
	MeasuredAccuracy  float64 `json:"measured_accuracy,omitempty"`
	PredictedAccuracy float64 `json:"predicted_accuracy,omitempty"`
	PageCharAccuracy  float64 `json:"page_char_accuracy,omitempty"`
	FirstError        string  `json:"first_error,omitempty"`
	// SeriesStartUnixMs is when the measurement began (wall clock); Series[i] holds the requests sent in the i-th
	// second from then. Only with Config.Series.
	SeriesStartUnixMs int64    `json:"series_start_unix_ms,omitempty"`
	Series            []Second `json:"series,omitempty"`
	// LostSentMs is when each lost request was sent, in ms from the series' start (with Config.Series).
	LostSentMs []int64 `json:"lost_sent_ms,omitempty"`
}

// Second is what became of the requests sent in one second of a run. A request violates its SLO unless its first
// reply is ok: a lost request, a failed publish and every other status are violations.
type Second struct {
	Sent       int `json:"sent"`
	OK         int `json:"ok"`
	Violations int `json:"violations"`
	Refused    int `json:"refused"` // of the violations, refused at once (status overloaded)
	Lost       int `json:"lost"`
	Duplicates int `json:"duplicates"`
}

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

// noDeadlineWait is how long a request without a known deadline may take before its grace starts.
const noDeadlineWait = 30 * time.Second

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
	var arrivals *workload.Arrivals // nil: Poisson at QPS
	if w := cfg.Workload; w != nil {
		if err := w.Validate(); err != nil {
			return Summary{}, err
		}
		cfg.Duration = w.Duration()
		cfg.QPS = 0
		for _, r := range w.Rates {
			cfg.QPS += r / float64(len(w.Rates))
		}
		arrivals = w.Arrivals(cfg.Seed)
	}
	if cfg.QPS <= 0 || cfg.Duration <= 0 {
		return Summary{}, errors.New("--qps and --duration must be positive")
	}
	if cfg.Grace == 0 {
		cfg.Grace = 5 * time.Second
	}
	if len(cfg.InputShape) == 0 {
		cfg.InputShape = []int64{64, 192}
	}
	n, err := wire.NumElements(cfg.InputShape)
	if err != nil {
		return Summary{}, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x10ad))
	values := make([]float32, n)
	for i := range values {
		values[i] = rng.Float32()
	}
	payload, err := msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{wire.NewFP32("image", cfg.InputShape, values)}})
	if err != nil {
		return Summary{}, err
	}
	payloads := [][]byte{payload}
	if cfg.Images != nil {
		if payloads, err = imagePayloads(cfg.Images); err != nil {
			return Summary{}, err
		}
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
		defer func() {
			nc.SetDisconnectErrHandler(prevDisconnect)
			nc.SetReconnectHandler(prevReconnect)
		}()
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

	next := start
	var sendEnd, measureStart time.Time
	for i := 0; ; i++ {
		if arrivals != nil && next.Sub(start) >= cfg.Warmup {
			at, ok := arrivals.Next()
			if !ok {
				break
			}
			next = start.Add(cfg.Warmup + at)
		} else {
			rate := cfg.QPS
			if arrivals != nil { // its warmup, at its first rate
				rate = cfg.Workload.Rates[0]
			}
			next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		}
		if next.Sub(start) >= cfg.Warmup+cfg.Duration {
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
		p := &pendingReq{sent: now, warmup: warm, doc: i % len(payloads), retryEnd: now.Add(noDeadlineRetry)}
		wait := noDeadlineWait
		if cfg.Timeout > 0 {
			p.deadline, p.retryEnd, wait = now.Add(cfg.Timeout), now.Add(cfg.Timeout), cfg.Timeout
		}
		p.due = now.Add(wait + cfg.Grace)
		r.mu.Lock()
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
		m := r.attemptLocked(p, now)
		r.mu.Unlock()
		r.publish(p, m)
		sendEnd = time.Now()
	}
	if sendEnd.IsZero() {
		sendEnd = time.Now()
	}
	// Drain: wait for every reply, or until each outstanding request is past its loss time; then listen a little
	// longer for duplicates.
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
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(duplicateWait)
	close(stopProgress)
	progressDone.Wait()

	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sum
	if measureStart.IsZero() {
		measureStart = start
	}
	s.DurationS = sendEnd.Sub(measureStart).Seconds()
	if s.DurationS > 0 {
		s.AchievedQPS = float64(s.Sent) / s.DurationS
	}
	if s.Sent > 0 {
		s.SLOViolationRatio = float64(s.Sent-s.OK) / float64(s.Sent)
	}
	if accepted := s.Sent - s.Refused; accepted > 0 {
		s.AcceptedViolationRatio = float64(accepted-s.OK) / float64(accepted)
	}
	if r.accN > 0 {
		s.MeanAccuracy = r.accSum / float64(r.accN)
	}
	if cfg.Series {
		s.SeriesStartUnixMs = measureStart.UnixMilli()
		s.Series = slices.Clone(r.series)
		for _, p := range r.requests {
			if p.lost && !p.warmup {
				s.LostSentMs = append(s.LostSentMs, p.sinceMs)
			}
		}
		slices.Sort(s.LostSentMs)
	}
	if t := r.truth; t.lines > 0 {
		s.MeasuredAccuracy = float64(t.exact) / float64(t.lines)
		s.PredictedAccuracy = t.predicted / float64(t.lines)
		s.PageCharAccuracy = t.pageChars / float64(t.pages)
	}
	slices.Sort(r.refusedLat)
	s.RefusedP99Ms = quantile(r.refusedLat, 0.99)
	slices.Sort(r.latencies)
	s.P50Ms, s.P95Ms, s.P99Ms = quantile(r.latencies, 0.5), quantile(r.latencies, 0.95), quantile(r.latencies, 0.99)
	if len(r.latencies) > 0 {
		total := 0.0
		for _, l := range r.latencies {
			total += l
		}
		s.MeanLatencyMs = total / float64(len(r.latencies))
	}
	if s.Sent > 0 && r.noResp == s.Sent {
		return s, fmt.Errorf("no frontend serves %s: every request failed with \"no responders\"", r.subject)
	}
	return s, nil
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

// What a client should do to lose nothing, as loadgen does unless Config.NoRetry: core NATS request-reply is at most
// once, so what is inside the server when it dies (requests and replies alike) is gone, and a reply published
// before the client has re-subscribed after a reconnect has nowhere to go. So after a reconnect the client sends
// again, once, each request still unanswered when the connection dropped, with the same absolute deadline; and a
// "no responders" answer (the request reached no frontend, which happens while the frontends re-subscribe) is
// tried again after a short wait while the deadline allows. Each attempt has a new reply subject. A request may
// then be served twice and its client told twice, once per attempt: the first reply is its outcome.

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

// loseLocked counts p lost: no reply to any of its attempts by its loss time.
func (r *run) loseLocked(p *pendingReq) {
	p.lost = true
	if !p.warmup {
		r.sum.Lost++
		r.series[p.second].Lost++
		r.series[p.second].Violations++
	}
}

// onReply records the first reply of a request as its outcome. A second reply to the same attempt, which must never
// happen, is counted as a duplicate; one after the request was counted lost as a late reply; one to an attempt of
// a request another attempt had answered as an extra reply.
func (r *run) onReply(m *nats.Msg) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.attempts[m.Subject]
	if !ok {
		r.sum.Errors++
		if r.sum.FirstError == "" {
			r.sum.FirstError = "a reply to no request sent: " + m.Subject
		}
		return
	}
	a.replies++
	p := a.req
	if !p.settled() && now.After(p.due) {
		// Past its loss time: lost, whether or not the drain has swept it yet.
		r.loseLocked(p)
	}
	switch {
	case p.lost:
		if !p.warmup {
			r.sum.LateReplies++
		}
		return
	case a.replies > 1:
		if !p.warmup {
			r.sum.Duplicates++
			r.series[p.second].Duplicates++
		}
		return
	case p.answered:
		if !p.warmup {
			r.sum.ExtraReplies++
		}
		return
	}
	noResponders := len(m.Data) == 0 && m.Header.Get("Status") == "503"
	if noResponders && r.retryLocked(p, now) {
		return
	}
	if noResponders {
		r.noRespondersLocked(p)
		return
	}
	p.answered = true
	if p.warmup {
		return
	}
	sec := &r.series[p.second]

	var rep wire.InferReply
	err := wire.UnmarshalMsgpack(m.Data, &rep)
	if lat := float64(now.Sub(p.sent).Microseconds()) / 1000; err == nil && rep.Status == wire.StatusOverloaded {
		r.refusedLat = append(r.refusedLat, lat)
	} else {
		r.latencies = append(r.latencies, lat)
	}
	if err == nil && rep.Status == wire.StatusOK {
		sec.OK++
	} else {
		sec.Violations++
	}
	if err != nil {
		r.sum.Errors++
		if r.sum.FirstError == "" {
			r.sum.FirstError = "undecodable reply: " + err.Error()
		}
		return
	}
	switch rep.Status {
	case wire.StatusOK:
		r.sum.OK++
		r.accSum, r.accN = r.accSum+rep.Accuracy, r.accN+1
		if r.images != nil {
			truth := r.images.Documents[p.doc].Lines
			sc := ocr.ScorePage(ocrReads(rep.Results), truth)
			r.truth.exact += sc.ExactLines
			r.truth.lines += sc.Lines
			r.truth.predicted += rep.Accuracy * float64(sc.Lines)
			r.truth.pageChars += sc.CharAccuracy
			r.truth.pages++
		}
	case wire.StatusPartial:
		r.sum.Partial++
		r.accSum, r.accN = r.accSum+rep.Accuracy, r.accN+1
	case wire.StatusDropped:
		r.sum.Dropped++
	case wire.StatusLate:
		r.sum.Late++
	case wire.StatusOverloaded:
		r.sum.Refused++
		sec.Refused++
	default:
		r.sum.Errors++
		if r.sum.FirstError == "" {
			r.sum.FirstError = rep.Error
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(math.Round(q*float64(len(sorted)-1)))]
}

// report prints progress once per second until stop; during the warmup, what the warmup sent.
func (r *run) report(w io.Writer, start time.Time, warmup time.Duration, stop <-chan struct{}) {
	if w == nil {
		<-stop
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		s := r.sum
		inflight := 0
		for _, p := range r.requests {
			if !p.settled() {
				inflight++
			}
		}
		lat := slices.Clone(r.latencies)
		warmupSent := len(r.requests) - s.Sent
		r.mu.Unlock()
		if elapsed := time.Since(start); elapsed < warmup {
			fmt.Fprintf(w, "%5.1fs warming up (%.1fs left, not measured): sent %d in-flight %d\n",
				elapsed.Seconds(), (warmup - elapsed).Seconds(), warmupSent, inflight)
			continue
		}
		slices.Sort(lat)
		fmt.Fprintf(w, "%5.1fs sent %d ok %d partial %d dropped %d late %d errors %d refused %d in-flight %d p50 %.1fms\n",
			time.Since(start).Seconds(), s.Sent, s.OK, s.Partial, s.Dropped, s.Late, s.Errors, s.Refused, inflight,
			quantile(lat, 0.5))
	}
}

// parseShape reads "64,192".
func parseShape(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		d, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || d < 1 {
			return nil, fmt.Errorf("--input-shape %q: want positive integers separated by commas", s)
		}
		out = append(out, d)
	}
	return out, nil
}

// imagePayloads encodes one request per image of a labelled set: the PNG as a BYTES tensor "image".
func imagePayloads(set *ocr.Set) ([][]byte, error) {
	out := make([][]byte, len(set.Documents))
	for i := range set.Documents {
		b, err := set.ImageBytes(i)
		if err != nil {
			return nil, err
		}
		if out[i], err = msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{wire.NewBytes(ocr.TensorImage, [][]byte{b})}}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ocrReads are the lines an OCR reply carries: each finished leaf's text and box.
func ocrReads(results []wire.ItemResult) []ocr.Read {
	var reads []ocr.Read
	for _, it := range results {
		if read, ok := ocr.ReadOf(it.Outputs); ok {
			reads = append(reads, read)
		}
	}
	return reads
}
