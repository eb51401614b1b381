package worker

import (
	"bytes"
	"context"
	"image/png"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/onnxtest"
	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/completion"
	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	_ "github.com/sleipnir-serving/sleipnir/pkg/executor/onnxexec" // the real OCR programs
	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// ocrTrustSpec is the OCR pipeline tests serve, with examples/ocr.yaml's declared inputs.
const ocrTrustSpec = onnxtest.OCRPipeline + `
inputs:
  - {name: image, datatype: BYTES, shape: [1]}
  - {name: image, datatype: UINT8, shape: [-1, -1, 3]}
`

// panicMark marks the requests whose batches panicOn's executor panics on.
const panicMark = "panic-"

// panicOn wraps a real executor: it panics on a batch holding a marked request (a bug in an executor, as generic as
// it gets), and records every request it was given.
type panicOn struct {
	executor.Executor
	mu   sync.Mutex
	seen map[string]bool
}

func (p *panicOn) Execute(ctx context.Context, batch []executor.Input) ([]executor.Output, error) {
	p.mu.Lock()
	for _, in := range batch {
		p.seen[in.RequestID] = true
	}
	p.mu.Unlock()
	for _, in := range batch {
		if strings.HasPrefix(in.RequestID, panicMark) {
			var m map[string]int
			m[in.RequestID]++ // assignment to entry in nil map
		}
	}
	return p.Executor.Execute(ctx, batch)
}

func (p *panicOn) saw(requestID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[requestID]
}

// TestWorkerSurvivesPoisonTaskMessages (issue 35): the crafted task message (a UINT8 image [274177,
// 67280421310721, 3] with 3 bytes: H x W x 3 wraps around to 3) published straight to the detector's subject, and a
// batch whose executor panics, reach a worker running the real OCR programs on ONNX Runtime. The worker survives:
// the crafted request is answered "error" by the check, without reaching the executor; the panicking one "error",
// the panic counted; and a normal request after each is answered "ok".
func TestWorkerSurvivesPoisonTaskMessages(t *testing.T) {
	models := onnxtest.Models(t, onnxtest.OCRModels...)
	r := newRigWith(t, ocrTrustSpec)
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg)
	var det *panicOn
	var detMu sync.Mutex
	wrap := func(spec *pipeline.Spec, task, variant string, opts executor.Options) (executor.Executor, error) {
		e, err := executor.New(spec, task, variant, opts)
		if err != nil || task != "find_text" {
			return e, err
		}
		detMu.Lock()
		defer detMu.Unlock()
		det = &panicOn{Executor: e, seen: map[string]bool{}}
		return det, nil
	}
	wd := r.startWorkerWith(Config{ID: "det", FetchWait: 100 * time.Millisecond, ModelsDir: models, NewExecutor: wrap, Metrics: m})
	wr := r.startWorkerWith(Config{ID: "rec", FetchWait: 100 * time.Millisecond, ModelsDir: models, Metrics: m})
	r.assignTask("det", "find_text", "det", 1)
	r.assignTask("rec", "read_text", "rec", 2)
	// Loading and warming up a model takes seconds under -race on a busy machine.
	testrig.Eventually(t, time.Minute, "the detector and the recogniser served", func() bool {
		return wd.Serving() == r.spec.Name+":find_text/det" && wr.Serving() == r.spec.Name+":read_text/rec"
	})

	fonts, _ := ocr.LoadFonts("")
	imgs, _, err := ocr.Generate(1, 35, fonts)
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := png.Encode(&page, imgs[0]); err != nil {
		t.Fatal(err)
	}
	send := func(requestID string, image wire.Tensor) {
		t.Helper()
		data, err := msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: wire.RootItemID, Den: 1, Inputs: []wire.Tensor{image}}}})
		if err != nil {
			t.Fatal(err)
		}
		r.publishTo("find_text", "det", requestID, time.Now().Add(time.Minute), nil, data)
	}
	normal := wire.NewBytes(ocr.TensorImage, [][]byte{page.Bytes()})
	crafted := wire.Tensor{Name: ocr.TensorImage, Datatype: "UINT8", Shape: []int64{274177, 67280421310721, 3}, Data: []byte{1, 2, 3}}
	replies := newReplies(r)

	send("crafted", crafted)
	reply := replies.await(t, "crafted", time.Minute)
	if st := reply.Status(false); st != wire.StatusError || !strings.Contains(reply.Results()[0].Reason, "has too many elements") {
		t.Fatalf("the crafted request: %s %+v, want error for its shape", st, reply.Results())
	}
	send("normal-1", normal)
	if reply := replies.await(t, "normal-1", time.Minute); reply.Status(false) != wire.StatusOK {
		t.Fatalf("a normal request after the crafted one: %s %+v", reply.Status(false), reply.Results())
	}
	if det.saw("crafted") {
		t.Error("the crafted item reached the executor: the worker did not check it")
	}

	send(panicMark+"1", normal)
	reply = replies.await(t, panicMark+"1", time.Minute)
	if st := reply.Status(false); st != wire.StatusError || !strings.Contains(reply.Results()[0].Reason, "the executor panicked") {
		t.Fatalf("the request whose batch panicked: %s %+v, want error saying so", st, reply.Results())
	}
	send("normal-2", normal)
	if reply := replies.await(t, "normal-2", time.Minute); reply.Status(false) != wire.StatusOK {
		t.Fatalf("a normal request after the panic: %s %+v", reply.Status(false), reply.Results())
	}
	if got := wd.Complaints()[ComplainPanic]; got != 1 {
		t.Errorf("%d panics logged, want 1", got)
	}
	if got := counterOf(t, reg, "sleipnir_worker_panics_total"); got != 1 {
		t.Errorf("sleipnir_worker_panics_total %v, want 1", got)
	}
	if got := wd.Complaints()[ComplainItem]; got != 1 {
		t.Errorf("%d invalid items logged, want 1", got)
	}
}

// replies gathers the rig's result messages into each request's completion, as a frontend does.
type replies struct {
	r    *rig
	reqs map[string]*completion.Tracker
}

func newReplies(r *rig) *replies { return &replies{r: r, reqs: map[string]*completion.Tracker{}} }

// await is the complete reply of a request: its leaves' weights sum to one.
func (p *replies) await(t *testing.T, requestID string, timeout time.Duration) *completion.Tracker {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if tr := p.reqs[requestID]; tr != nil && tr.Done() {
			return tr
		}
		select {
		case rm := <-p.r.results:
			tr := p.reqs[rm.RequestID]
			if tr == nil {
				tr = completion.New()
				p.reqs[rm.RequestID] = tr
			}
			for _, it := range rm.Items {
				if _, _, err := tr.Add(it); err != nil {
					t.Fatalf("request %s: %v", rm.RequestID, err)
				}
			}
		case <-time.After(time.Until(deadline)):
			t.Fatalf("request %s: no complete reply within %v", requestID, timeout)
		}
	}
}

// counterOf is the sum of a counter's series in reg.
func counterOf(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
