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

	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Config is one load run.
type Config struct {
	Pipeline string
	QPS      float64
	Duration time.Duration
	// Timeout, if set, is sent as each request's relative deadline; otherwise the frontend applies the SLO.
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
}

// Summary is the result of a run; its JSON form is loadgen's last line with --json.
type Summary struct {
	Pipeline          string  `json:"pipeline"`
	QPS               float64 `json:"qps"`
	DurationS         float64 `json:"duration_s"`
	Sent              int     `json:"sent"`
	OK                int     `json:"ok"`
	Partial           int     `json:"partial"`
	Dropped           int     `json:"dropped"`
	Late              int     `json:"late"`
	Errors            int     `json:"errors"`
	Lost              int     `json:"lost"`
	P50Ms             float64 `json:"p50_ms"`
	P95Ms             float64 `json:"p95_ms"`
	P99Ms             float64 `json:"p99_ms"`
	MeanLatencyMs     float64 `json:"mean_latency_ms"`
	SLOViolationRatio float64 `json:"slo_violation_ratio"`
	AchievedQPS       float64 `json:"achieved_qps"`
	// MeanAccuracy is the mean profiled end-to-end accuracy of the ok and partial replies (the reply's accuracy).
	MeanAccuracy float64 `json:"mean_accuracy"`
	// With a labelled set (--images), over the ok replies: the share of true lines found and read exactly (what
	// was served), the same as the profile predicts it (each reply's profiled accuracy, weighted by its true lines),
	// and the mean character accuracy of whole pages.
	MeasuredAccuracy  float64 `json:"measured_accuracy,omitempty"`
	PredictedAccuracy float64 `json:"predicted_accuracy,omitempty"`
	PageCharAccuracy  float64 `json:"page_char_accuracy,omitempty"`
	FirstError        string  `json:"first_error,omitempty"`
}

// noDeadlineWait is how long a request without a known deadline may take before its grace starts.
const noDeadlineWait = 30 * time.Second

type pendingReq struct {
	sent   time.Time
	due    time.Time // lost after this
	warmup bool      // sent during the warmup: not counted
	doc    int       // the labelled image the request carries
}

type run struct {
	mu        sync.Mutex
	pending   map[string]pendingReq
	latencies []float64
	sum       Summary
	noResp    int // "no responders" transport errors
	accSum    float64
	accN      int
	images    *ocr.Set
	truth     ocrTally
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
	if cfg.QPS <= 0 || cfg.Duration <= 0 {
		return Summary{}, errors.New("--qps and --duration must be positive")
	}
	if cfg.Grace == 0 {
		cfg.Grace = 5 * time.Second
	}
	if len(cfg.InputShape) == 0 {
		cfg.InputShape = []int64{1, 3, 64, 64}
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

	r := &run{pending: map[string]pendingReq{}, sum: Summary{Pipeline: cfg.Pipeline, QPS: cfg.QPS}, images: cfg.Images}
	inbox := nats.NewInbox()
	sub, err := nc.Subscribe(inbox+".*", r.onReply)
	if err != nil {
		return Summary{}, err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)

	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	progressDone.Add(1)
	start := time.Now()
	go func() {
		defer progressDone.Done()
		r.report(progress, start, stopProgress)
	}()

	subject := wire.InferSubject(cfg.Pipeline)
	next := start
	var sendEnd, measureStart time.Time
	for i := 0; ; i++ {
		next = next.Add(time.Duration(rng.ExpFloat64() / cfg.QPS * float64(time.Second)))
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
		m := nats.NewMsg(subject)
		m.Reply = inbox + "." + strconv.Itoa(i)
		m.Data = payloads[i%len(payloads)]
		m.Header.Set(wire.HeaderContentType, wire.ContentMsgpack)
		wait := noDeadlineWait
		if cfg.Timeout > 0 {
			m.Header.Set(wire.HeaderTimeout, cfg.Timeout.String())
			wait = cfg.Timeout
		}
		now := time.Now()
		warm := now.Sub(start) < cfg.Warmup
		if !warm && measureStart.IsZero() {
			measureStart = now
		}
		r.mu.Lock()
		r.pending[m.Reply] = pendingReq{sent: now, due: now.Add(wait + cfg.Grace), warmup: warm, doc: i % len(payloads)}
		if !warm {
			r.sum.Sent++
		}
		r.mu.Unlock()
		if err := nc.PublishMsg(m); err != nil {
			r.mu.Lock()
			delete(r.pending, m.Reply)
			if !warm {
				r.sum.Errors++
				if r.sum.FirstError == "" {
					r.sum.FirstError = err.Error()
				}
			}
			r.mu.Unlock()
		}
		sendEnd = time.Now()
	}
	if sendEnd.IsZero() {
		sendEnd = time.Now()
	}
	// Drain: wait for every reply, or until each outstanding request is past its loss time.
	for {
		r.mu.Lock()
		now, left := time.Now(), 0
		for subj, p := range r.pending {
			if now.After(p.due) {
				delete(r.pending, subj)
				if !p.warmup {
					r.sum.Lost++
				}
			} else {
				left++
			}
		}
		r.mu.Unlock()
		if left == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	if r.accN > 0 {
		s.MeanAccuracy = r.accSum / float64(r.accN)
	}
	if t := r.truth; t.lines > 0 {
		s.MeasuredAccuracy = float64(t.exact) / float64(t.lines)
		s.PredictedAccuracy = t.predicted / float64(t.lines)
		s.PageCharAccuracy = t.pageChars / float64(t.pages)
	}
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
		return s, fmt.Errorf("no frontend serves %s: every request failed with \"no responders\"", subject)
	}
	return s, nil
}

// onReply records the one reply of a request (a second one, which must never happen, is counted as an error).
func (r *run) onReply(m *nats.Msg) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pending[m.Subject]
	if !ok {
		r.sum.Errors++
		if r.sum.FirstError == "" {
			r.sum.FirstError = "a reply for a request already answered or lost: " + m.Subject
		}
		return
	}
	delete(r.pending, m.Subject)
	if p.warmup {
		return
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		r.noResp++
		r.sum.Errors++
		if r.sum.FirstError == "" {
			r.sum.FirstError = "no responders"
		}
		return
	}
	r.latencies = append(r.latencies, float64(now.Sub(p.sent).Microseconds())/1000)
	var rep wire.InferReply
	if err := wire.UnmarshalMsgpack(m.Data, &rep); err != nil {
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
	default:
		r.sum.Errors++
		if r.sum.FirstError == "" {
			r.sum.FirstError = rep.Error
		}
	}
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(math.Round(q*float64(len(sorted)-1)))]
}

// report prints progress once per second until stop.
func (r *run) report(w io.Writer, start time.Time, stop <-chan struct{}) {
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
		inflight := len(r.pending)
		lat := slices.Clone(r.latencies)
		r.mu.Unlock()
		slices.Sort(lat)
		fmt.Fprintf(w, "%5.1fs sent %d ok %d partial %d dropped %d late %d errors %d in-flight %d p50 %.1fms\n",
			time.Since(start).Seconds(), s.Sent, s.OK, s.Partial, s.Dropped, s.Late, s.Errors, inflight, quantile(lat, 0.5))
	}
}

// parseShape reads "1,3,64,64".
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
		if out[i], err = msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{wire.NewBytes(executor.TensorImage, [][]byte{b})}}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ocrReads are the lines an OCR reply carries: each finished leaf's text and box.
func ocrReads(results []wire.ItemResult) []ocr.Read {
	var reads []ocr.Read
	for _, it := range results {
		if read, ok := executor.ReadOCR(it.Outputs); ok {
			reads = append(reads, read)
		}
	}
	return reads
}
