package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// connect is a connection with loadgen's settings to a server of the test's own, over loopback as loadgen reaches
// Sleipnir.
func connect(t *testing.T) *nats.Conn {
	t.Helper()
	return testrig.Connect(t, testrig.Server(t, testrig.Listen()).URL(), "loadgen-test", ClientOptions("loadgen-test")...)
}

// respond answers requests on the pipeline's subject with the status status(i) returns for the i-th request;
// "" leaves it unanswered. delay postpones each reply without holding up the next request.
func respond(t *testing.T, nc *nats.Conn, status func(i int64) string, delay time.Duration) {
	var n atomic.Int64
	_, err := nc.Subscribe(wire.InferSubject("p"), func(m *nats.Msg) {
		st := status(n.Add(1) - 1)
		if st == "" {
			return
		}
		data, _ := msgpack.Marshal(&wire.InferReply{RequestID: "x", Pipeline: "p", Status: st})
		go func() {
			time.Sleep(delay) // the responder's latency
			m.Respond(data)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCountsEveryOutcome(t *testing.T) {
	nc := connect(t)
	statuses := []string{wire.StatusOK, wire.StatusOK, wire.StatusLate, wire.StatusPartial, wire.StatusDropped, wire.StatusError,
		wire.StatusOverloaded, ""}
	respond(t, nc, func(i int64) string { return statuses[i%int64(len(statuses))] }, 0)
	s, err := Run(context.Background(), nc, Config{Pipeline: "p", QPS: 300, Duration: time.Second,
		Timeout: 100 * time.Millisecond, Grace: 200 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Sent == 0 || s.OK+s.Late+s.Partial+s.Dropped+s.Errors+s.Refused+s.Lost != s.Sent {
		t.Fatalf("outcomes do not add up to sent: %+v", s)
	}
	if s.Lost == 0 || s.Late == 0 || s.Errors == 0 || s.Partial == 0 || s.Dropped == 0 || s.Refused == 0 {
		t.Errorf("an outcome was not counted: %+v", s)
	}
	if want := float64(s.Sent-s.OK) / float64(s.Sent); s.SLOViolationRatio != want {
		t.Errorf("violation ratio %v, want %v", s.SLOViolationRatio, want)
	}
	if want := float64(s.Sent-s.Refused-s.OK) / float64(s.Sent-s.Refused); s.AcceptedViolationRatio != want {
		t.Errorf("violation ratio among the accepted %v, want %v", s.AcceptedViolationRatio, want)
	}
	if s.P50Ms <= 0 || s.P99Ms < s.P50Ms {
		t.Errorf("latency percentiles %v %v", s.P50Ms, s.P99Ms)
	}
}

// TestRefusalsApart: refusals (status overloaded) come at once, the other replies after 80 ms: the refusals are
// counted and timed apart, the latency percentiles are the accepted requests', and so are the violations of
// accepted_violation_ratio (the late ones, a fifth of the accepted).
func TestRefusalsApart(t *testing.T) {
	nc := connect(t)
	// The accepted requests' latency, far above what a refusal's round trip takes even on a busy CI machine (80 ms
	// was not: a refusal's p99 reached it under load).
	const acceptedLatency = 300 * time.Millisecond
	statuses := []string{wire.StatusOverloaded, wire.StatusOK, wire.StatusOverloaded, wire.StatusOK, wire.StatusOK,
		wire.StatusOK, wire.StatusLate}
	var n atomic.Int64
	if _, err := nc.Subscribe(wire.InferSubject("p"), func(m *nats.Msg) {
		st := statuses[(n.Add(1)-1)%int64(len(statuses))]
		data, _ := msgpack.Marshal(&wire.InferReply{RequestID: "x", Pipeline: "p", Status: st})
		if st == wire.StatusOverloaded {
			m.Respond(data)
			return
		}
		time.AfterFunc(acceptedLatency, func() { m.Respond(data) })
	}); err != nil {
		t.Fatal(err)
	}
	s, err := Run(context.Background(), nc, Config{Pipeline: "p", QPS: 200, Duration: time.Second,
		Timeout: 2 * time.Second, Grace: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Refused == 0 || s.Refused+s.OK+s.Late != s.Sent || s.Lost != 0 {
		t.Fatalf("outcomes: %+v", s)
	}
	if ms := float64(acceptedLatency.Milliseconds()); s.RefusedP99Ms <= 0 || s.RefusedP99Ms >= ms || s.P50Ms < ms {
		t.Errorf("refusals' p99 %.1f ms, accepted p50 %.1f ms: want the refusals under %v ms, the others over",
			s.RefusedP99Ms, s.P50Ms, ms)
	}
	if want := float64(s.Late) / float64(s.OK+s.Late); s.AcceptedViolationRatio != want || s.SLOViolationRatio <= want {
		t.Errorf("violations among the accepted %v (all %v), want %v: the late among the accepted",
			s.AcceptedViolationRatio, s.SLOViolationRatio, want)
	}
	line, _ := json.Marshal(s)
	for _, key := range []string{`"refused":`, `"refused_p99_ms":`, `"accepted_violation_ratio":`} {
		if !bytes.Contains(line, []byte(key)) {
			t.Errorf("JSON summary lacks %s: %s", key, line)
		}
	}
}

// TestOpenLoopPoisson: the arrival count is Poisson-plausible, and slow replies do not slow the sending.
func TestOpenLoopPoisson(t *testing.T) {
	nc := connect(t)
	respond(t, nc, func(int64) string { return wire.StatusOK }, 500*time.Millisecond)
	s, err := Run(context.Background(), nc, Config{Pipeline: "p", QPS: 200, Duration: 2 * time.Second, Grace: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 400 expected; 3.5 standard deviations either side.
	if s.Sent < 330 || s.Sent > 470 {
		t.Errorf("sent %d in 2 s at 200 QPS", s.Sent)
	}
	if s.AchievedQPS < 165 || s.OK != s.Sent {
		t.Errorf("500 ms replies held the sender back or were lost: %+v", s)
	}
	if s.P50Ms < 500 {
		t.Errorf("p50 %v ms, but every reply took 500 ms", s.P50Ms)
	}
}

func TestNoResponders(t *testing.T) {
	nc := connect(t)
	s, err := Run(context.Background(), nc, Config{Pipeline: "p", QPS: 50, Duration: 200 * time.Millisecond}, nil)
	if err == nil || !strings.Contains(err.Error(), "no responders") {
		t.Fatalf("err %v, want no responders", err)
	}
	if s.Errors != s.Sent || s.Sent == 0 {
		t.Errorf("summary %+v", s)
	}
}

func TestSummaryJSONKeys(t *testing.T) {
	data, _ := json.Marshal(Summary{})
	var m map[string]any
	json.Unmarshal(data, &m)
	for _, k := range []string{"sent", "ok", "partial", "dropped", "late", "errors", "lost", "p50_ms", "p95_ms", "p99_ms",
		"mean_latency_ms", "slo_violation_ratio", "mean_accuracy", "achieved_qps", "duration_s", "qps", "pipeline"} {
		if _, ok := m[k]; !ok {
			t.Errorf("summary JSON lacks %q", k)
		}
	}
}

func TestParseShape(t *testing.T) {
	if s, err := parseShape("1,3,8,8"); err != nil || len(s) != 4 {
		t.Errorf("parseShape: %v %v", s, err)
	}
	for _, bad := range []string{"1,x", "0", ""} {
		if _, err := parseShape(bad); err == nil {
			t.Errorf("parseShape(%q) accepted", bad)
		}
	}
}

// TestWarmupIsNotCounted: the first requests are errors, but they fall in the warmup; what is measured is all ok.
func TestWarmupIsNotCounted(t *testing.T) {
	nc := connect(t)
	var first time.Time
	var mu sync.Mutex
	respond(t, nc, func(int64) string {
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() {
			first = time.Now()
		}
		if time.Since(first) < 300*time.Millisecond {
			return wire.StatusError
		}
		return wire.StatusOK
	}, 0)
	var progress bytes.Buffer
	s, err := Run(context.Background(), nc, Config{Pipeline: "p", QPS: 200, Warmup: 600 * time.Millisecond,
		Duration: time.Second, Grace: time.Second}, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(progress.String(), "warming up for 600ms at 200 QPS (sent, not measured), then measuring for 1s\n") {
		t.Errorf("progress does not open with the warmup:\n%s", progress.String())
	}
	if s.Sent < 100 || s.OK != s.Sent || s.Errors != 0 {
		t.Fatalf("errors of the warmup were counted, or too little was measured: %+v", s)
	}
	if s.DurationS < 0.8 || s.DurationS > 1.1 {
		t.Errorf("measured for %.2f s, want about the 1 s after the warmup", s.DurationS)
	}
}

// TestImagesAreCheckedAgainstTheirTruth: with a labelled set, each request carries one of its images, and each ok
// reply is scored against that image's lines. The responder reads every line right except the first line of the
// first image, and claims an accuracy of 0.8: loadgen measures a little under 1 and predicts exactly 0.8.
func TestImagesAreCheckedAgainstTheirTruth(t *testing.T) {
	nc := connect(t)
	fonts, _ := ocr.LoadFonts("")
	dir := t.TempDir()
	if _, err := ocr.WriteSet(dir, 3, 5, fonts); err != nil {
		t.Fatal(err)
	}
	set, err := ocr.ReadSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	byImage := map[string]int{}
	for i := range set.Documents {
		b, _ := set.ImageBytes(i)
		byImage[string(b)] = i
	}
	_, err = nc.Subscribe(wire.InferSubject("p"), func(m *nats.Msg) {
		var req wire.InferRequest
		msgpack.Unmarshal(m.Data, &req)
		els, _ := req.Inputs[0].Elements()
		doc, ok := byImage[string(els[0])]
		rep := wire.InferReply{RequestID: "x", Pipeline: "p", Status: wire.StatusOK, Accuracy: 0.8}
		if !ok {
			rep.Status = wire.StatusError
		}
		for k, l := range set.Documents[doc].Lines {
			text := l.Text
			if doc == 0 && k == 0 {
				text += "!"
			}
			b := l.Box
			rep.Results = append(rep.Results, wire.ItemResult{ID: fmt.Sprint(k), Status: wire.ItemOK, Outputs: []wire.Tensor{
				wire.NewBytes(ocr.TensorText, [][]byte{[]byte(text)}),
				wire.NewFP32(ocr.TensorBox, []int64{4}, []float32{float32(b.X0), float32(b.Y0), float32(b.X1), float32(b.Y1)}),
			}})
		}
		data, _ := msgpack.Marshal(&rep)
		m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Run(context.Background(), nc, Config{Pipeline: "p", QPS: 100, Duration: time.Second, Grace: time.Second, Images: set}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.OK != s.Sent || s.Sent == 0 {
		t.Fatalf("a request did not carry one of the set's images: %+v", s)
	}
	if s.MeasuredAccuracy >= 1 || s.MeasuredAccuracy < 0.8 {
		t.Errorf("measured accuracy %v, want just under 1 (one line in the set misread)", s.MeasuredAccuracy)
	}
	if math.Abs(s.PredictedAccuracy-0.8) > 1e-9 {
		t.Errorf("predicted accuracy %v, want the replies' 0.8", s.PredictedAccuracy)
	}
}

// TestDuplicatesAndSeries: a responder that answers every third request twice, leaves every fifth unanswered until
// after its loss, and fails every seventh. Loadgen counts each duplicate once, the late replies apart from the
// duplicates, and the per-second series adds up to the totals. Margins are wide (the immediate replies have 1 s);
// only the late replies, which must come in the 0.5 s loadgen listens after the last loss, are counted loosely.
func TestDuplicatesAndSeries(t *testing.T) {
	nc := connect(t)
	var n atomic.Int64
	_, err := nc.Subscribe(wire.InferSubject("p"), func(m *nats.Msg) {
		i := n.Add(1) - 1
		st := wire.StatusOK
		if i%7 == 6 {
			st = wire.StatusError
		}
		data, _ := msgpack.Marshal(&wire.InferReply{RequestID: "x", Pipeline: "p", Status: st})
		switch {
		case i%5 == 4: // answered after its loss time (timeout 500 ms + grace 500 ms)
			go func() { time.Sleep(1200 * time.Millisecond); m.Respond(data) }()
		case i%3 == 2:
			m.Respond(data)
			m.Respond(data)
		default:
			m.Respond(data)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Run(context.Background(), nc, Config{Pipeline: "p", QPS: 200, Duration: 2 * time.Second,
		Timeout: 500 * time.Millisecond, Grace: 500 * time.Millisecond, Series: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sent := int(n.Load())
	var wantDup, wantLost, wantOK int
	for i := range sent {
		switch {
		case i%5 == 4:
			wantLost++
		case i%3 == 2:
			wantDup++
			fallthrough
		default:
			if i%7 != 6 {
				wantOK++
			}
		}
	}
	if s.Sent != sent || s.Duplicates != wantDup || s.Lost != wantLost || s.OK != wantOK {
		t.Errorf("sent %d dup %d lost %d ok %d, want %d %d %d %d", s.Sent, s.Duplicates, s.Lost, s.OK, sent, wantDup,
			wantLost, wantOK)
	}
	if s.LateReplies == 0 || s.LateReplies > wantLost {
		t.Errorf("%d late replies, want some and at most the %d lost", s.LateReplies, wantLost)
	}
	var tot Second
	for _, sec := range s.Series {
		tot.Sent += sec.Sent
		tot.OK += sec.OK
		tot.Violations += sec.Violations
		tot.Lost += sec.Lost
		tot.Duplicates += sec.Duplicates
	}
	lostAt := s.LostSentMs
	if len(lostAt) != s.Lost || len(lostAt) > 0 && (lostAt[0] < 0 || lostAt[len(lostAt)-1] > 2100) {
		t.Errorf("lost requests sent at %v ms, want %d times within the 2 s run", s.LostSentMs, s.Lost)
	}
	if len(s.Series) < 2 || len(s.Series) > 3 || s.SeriesStartUnixMs == 0 {
		t.Errorf("%d seconds in the series of a 2 s run, start %d", len(s.Series), s.SeriesStartUnixMs)
	}
	want := Second{Sent: s.Sent, OK: s.OK, Violations: s.Sent - s.OK, Lost: s.Lost, Duplicates: s.Duplicates}
	if tot != want {
		t.Errorf("series adds up to %+v, want %+v", tot, want)
	}
}

// TestWorkloadSteps: --workload sends the simulator's workloads live: a step from 50 to 250 QPS shows in the
// per-second series as it would in bin/sleipnir sim's.
func TestWorkloadSteps(t *testing.T) {
	nc := connect(t)
	respond(t, nc, func(int64) string { return wire.StatusOK }, 0)
	w, err := workload.Parse("steps:50:2s,250:2s", 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Run(context.Background(), nc, Config{Pipeline: "p", Workload: w, Grace: time.Second, Series: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The series is by second of sending: a request due just before the end and sent late (a loaded machine)
	// lands in a fifth second, which then holds a few.
	if len(s.Series) < 4 || len(s.Series) > 5 || len(s.Series) == 5 && s.Series[4].Sent > 25 {
		t.Fatalf("%d seconds in the series (%+v), want 4 (and a few sent late in a fifth)", len(s.Series), s.Series)
	}
	before := s.Series[0].Sent + s.Series[1].Sent
	after := s.Series[2].Sent + s.Series[3].Sent
	// Poisson counts over 2 s: 100 +- 10 and 500 +- 22; 5 standard deviations either way.
	if before < 50 || before > 150 || after < 390 || after > 610 || s.OK != s.Sent {
		t.Fatalf("sent %d then %d over 2 s each (want about 100 then 500), %d ok of %d", before, after, s.OK, s.Sent)
	}
	if s.QPS != 150 {
		t.Fatalf("summary qps %v, want the workload's mean 150", s.QPS)
	}
}

// TestScheduleIsWhatRunSends: Schedule draws the times Run sends at (the fidelity check simulates them), every
// request of the warmup and the measured part, and the seed's own.
func TestScheduleIsWhatRunSends(t *testing.T) {
	nc := connect(t)
	var received atomic.Int64
	respond(t, nc, func(int64) string { received.Add(1); return wire.StatusOK }, 0)
	cfg := Config{Pipeline: "p", QPS: 300, Warmup: 300 * time.Millisecond, Duration: 700 * time.Millisecond,
		Grace: time.Second, Seed: 7}
	times, err := Schedule(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), nc, cfg, nil); err != nil {
		t.Fatal(err)
	}
	if n := received.Load(); n != int64(len(times)) {
		t.Errorf("Run sent %d requests, Schedule has %d", n, len(times))
	}
	for i, d := range times {
		if d < 0 || d >= cfg.Warmup+cfg.Duration || i > 0 && d < times[i-1] {
			t.Fatalf("time %d of the schedule, %v, is out of order or outside the run", i, d)
		}
	}
	cfg.Seed = 8
	other, err := Schedule(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(other) > 0 && len(times) > 0 && other[0] == times[0] {
		t.Errorf("seeds 7 and 8 drew the same first arrival, %v", times[0])
	}
}
