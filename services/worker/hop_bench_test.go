package worker

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/telemetry"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

const chainSpec = `
name: hop
slo_ms: 1000
tasks:
  - name: a
    children: [b]
    variants:
      - name: x
        accuracy: 0.9
        executor: {kind: emulated}
        fanout: {mean: 1, distribution: fixed}
        profile: [{batch: 1, p50_ms: 1, p95_ms: 1}]
  - name: b
    variants:
      - name: y
        accuracy: 0.9
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 1, p95_ms: 1}]
allocation:
  - {task: a, variant: x, replicas: 1, max_batch: 1}
  - {task: b, variant: y, replicas: 1, max_batch: 1}
`

// passThrough is an executor that takes no time and passes each item's inputs to one sub-request of each child task,
// so the benchmark measures Sleipnir's per-hop work, not a model.
type passThrough struct{ children []string }

func (p passThrough) Execute(_ context.Context, batch []executor.Input) ([]executor.Output, error) {
	out := make([]executor.Output, len(batch))
	for i, in := range batch {
		out[i].Children = map[string][][]wire.Tensor{}
		for _, c := range p.children {
			out[i].Children[c] = [][]wire.Tensor{in.Tensors}
		}
	}
	return out, nil
}
func (passThrough) Close() error { return nil }

// BenchmarkHop compares one Sleipnir hop with the same JetStream operations done bare, interleaved so that both see
// the same machine load. Both paths: publish to a variant subject, fetch it with a durable pull consumer, publish to
// the next subject and wait for its ack, ack, and the next subject's consumer fetches it. The bare path's messages
// carry the headers the design needs on every hop (Sleipnir-Deadline, a unique Nats-Msg-Id, and traceparent when
// traced); Sleipnir's hop adds its envelope's msgpack decoding, the deadline check, the executor call, routing, item
// weights, tracing and encoding. Reported: p50 and p95 of each, in microseconds, and the ratio of the p50s (issue
// 48's target: at most 1.15).
func BenchmarkHop(b *testing.B) {
	b.Run("tracer=none", func(b *testing.B) { benchmarkHop(b, false) })
	// What a service runs by default (telemetry.Setup, no exporter): every request sampled, its trace context
	// carried on, no span recorded.
	b.Run("tracer=sdk", func(b *testing.B) { benchmarkHopTraced(b, "", false) })
	// Sampling no request: trace contexts made and carried, unsampled.
	b.Run("tracer=sdk-unsampled", func(b *testing.B) { benchmarkHopTraced(b, "0", false) })
	// Exporting every span over OTLP/HTTP to a collector that takes everything: what a traced deployment pays.
	b.Run("tracer=otlp", func(b *testing.B) { benchmarkHopTraced(b, "", true) })
	b.Run("leaf", benchmarkLeaf)
}

// benchmarkHopTraced is benchmarkHop under telemetry.Setup, sampling ratio (OTEL_TRACES_SAMPLER_ARG; "" the
// default), exporting to a collector on this machine when export.
func benchmarkHopTraced(b *testing.B, ratio string, export bool) {
	if ratio != "" {
		b.Setenv("OTEL_TRACES_SAMPLER_ARG", ratio)
	}
	if export {
		collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
		}))
		defer collector.Close()
		b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	}
	shutdown, err := telemetry.Setup(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		shutdown(context.Background())
		otel.SetTracerProvider(noop.NewTracerProvider())
	}()
	benchmarkHop(b, true)
}

// benchmarkLeaf times a leaf hop one message after another: publish a task message to a leaf variant, and its
// result reaches the rig (which confirms it, as a frontend does). The next message is published as the result
// arrives, so a worker that holds its acknowledgement until the result is confirmed makes the next hop wait for the
// confirmation's round trip: what a confirmed result costs a worker per hop shows in leaf-p50-us.
func benchmarkLeaf(b *testing.B) {
	r := newRigWith(b, chainSpec)
	w := r.startWorkerWith(Config{ID: "leaf", FetchWait: time.Second,
		NewExecutor: func(spec *pipeline.Spec, task, _ string, _ executor.Options) (executor.Executor, error) {
			return passThrough{children: spec.Task(task).Children}, nil
		}})
	r.assignTask("leaf", "b", "y", 1)
	r.waitServingTask(w, "b", "y")
	input := wire.NewFP32("x", []int64{1, 64}, make([]float32, 64))
	payload, _ := msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: "0", Den: 1, Inputs: []wire.Tensor{input}}}})
	deadline := wire.FormatDeadline(time.Now().Add(time.Hour))
	var leaf []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		m := nats.NewMsg(wire.TaskSubject("hop", "b", "y"))
		m.Data = payload
		m.Header.Set(wire.HeaderRequestID, fmt.Sprint("r", i))
		m.Header.Set(wire.HeaderDeadline, deadline)
		m.Header.Set(wire.HeaderReplyTo, r.reply)
		t0 := time.Now()
		if _, err := r.js.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
		r.next(5 * time.Second)
		leaf = append(leaf, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(percentileUs(leaf, 0.5), "leaf-p50-us")
	b.ReportMetric(percentileUs(leaf, 0.95), "leaf-p95-us")
}

// percentileUs is the q-quantile of d, in microseconds (d is sorted).
func percentileUs(d []time.Duration, q float64) float64 {
	slices.Sort(d)
	return float64(d[int(q*float64(len(d)-1))].Nanoseconds()) / 1000
}

// benchmarkHop runs the two paths; traced gives the bare path's messages a traceparent header, as a traced hop's
// carry.
func benchmarkHop(b *testing.B, traced bool) {
	r := newRigWith(b, chainSpec)
	ctx := context.Background()
	// The worker and the bare forwarder each on a connection of its own, as processes of their own are, and each
	// under a pprof label (inherited by the connection's goroutines, the client's and the embedded server's), so
	// that a CPU profile tells their shares apart (docs/measurements.md).
	var w *Worker
	var fwd *nats.Conn
	pprof.Do(ctx, pprof.Labels("proc", "worker"), func(context.Context) {
		w = r.startWorkerOn(r.srv.Connect(b, "worker"), Config{ID: "hop", FetchWait: time.Second,
			NewExecutor: func(spec *pipeline.Spec, task, _ string, _ executor.Options) (executor.Executor, error) {
				return passThrough{children: spec.Task(task).Children}, nil
			}})
	})
	r.assignTask("hop", "a", "x", 1)
	r.waitServingTask(w, "a", "x")
	next, err := bus.EnsureVariantConsumer(ctx, r.js, "hop", "b", "y", 0)
	if err != nil {
		b.Fatal(err)
	}

	// The bare path: its own stream and two consumers, and a forwarder goroutine doing fetch, publish, wait for the
	// publish's acknowledgement, ack. It pulls as a worker does: one pull request at a time over one subscription
	// (bus.Puller; nats.go's pull subscription).
	if _, err := r.js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage, Duplicates: 2 * time.Minute}); err != nil {
		b.Fatal(err)
	}
	_, _ = r.js.CreateOrUpdateConsumer(ctx, "RAW", jetstream.ConsumerConfig{Durable: "in", FilterSubject: "raw.in", AckPolicy: jetstream.AckExplicitPolicy})
	rawOut, _ := r.js.CreateOrUpdateConsumer(ctx, "RAW", jetstream.ConsumerConfig{Durable: "out", FilterSubject: "raw.out", AckPolicy: jetstream.AckExplicitPolicy})
	pprof.Do(ctx, pprof.Labels("proc", "bare"), func(context.Context) { fwd = r.srv.Connect(b, "bare") })
	legacy, err := fwd.JetStream()
	if err != nil {
		b.Fatal(err)
	}
	fwdJS, err := jetstream.New(fwd)
	if err != nil {
		b.Fatal(err)
	}
	rawIn, err := legacy.PullSubscribe("raw.in", "in", nats.Bind("RAW", "in"))
	if err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go pprof.Do(ctx, pprof.Labels("proc", "bare"), func(context.Context) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			batch, err := rawIn.Fetch(1, nats.MaxWait(time.Second))
			if err != nil {
				continue
			}
			for _, m := range batch {
				out := &nats.Msg{Subject: "raw.out", Data: m.Data, Header: nats.Header{}}
				out.Header.Set(wire.HeaderDeadline, m.Header.Get(wire.HeaderDeadline))
				out.Header.Set(wire.HeaderMsgID, m.Header.Get(wire.HeaderMsgID)+">out")
				if tp := m.Header.Get(wire.HeaderTraceParent); tp != "" {
					out.Header.Set(wire.HeaderTraceParent, tp)
				}
				f, err := fwdJS.PublishMsgAsync(out)
				if err == nil {
					<-f.Ok()
				}
				_ = m.Ack()
			}
		}
	})
	fetchOne := func(c jetstream.Consumer) jetstream.Msg {
		batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for m := range batch.Messages() {
			m.Ack()
			return m
		}
		b.Fatal("no message came through")
		return nil
	}

	input := wire.NewFP32("x", []int64{1, 64}, make([]float32, 64)) // 256 B, as the stack notes measured
	payload, _ := msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: "0", Den: 1, Inputs: []wire.Tensor{input}}}})
	deadline := wire.FormatDeadline(time.Now().Add(time.Hour))
	var raw, hop []time.Duration
	b.ResetTimer()
	// A valid, sampled trace context: the bare path carries it as a header and nothing more.
	const traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for i := 0; b.Loop(); i++ {
		in := nats.NewMsg("raw.in")
		in.Data = payload
		in.Header.Set(wire.HeaderDeadline, deadline)
		in.Header.Set(wire.HeaderMsgID, fmt.Sprint("raw", i))
		if traced {
			in.Header.Set(wire.HeaderTraceParent, traceParent)
		}
		t0 := time.Now()
		if _, err := r.js.PublishMsgAsync(in); err != nil {
			b.Fatal(err)
		}
		fetchOne(rawOut)
		raw = append(raw, time.Since(t0))

		m := nats.NewMsg(wire.TaskSubject("hop", "a", "x"))
		m.Data = payload
		m.Header.Set(wire.HeaderRequestID, fmt.Sprint("r", i))
		m.Header.Set(wire.HeaderDeadline, deadline)
		m.Header.Set(wire.HeaderReplyTo, r.reply)
		m.Header.Set(wire.HeaderMsgID, wire.TaskMsgID(fmt.Sprint("r", i), "", "a", "x"))
		t0 = time.Now()
		if _, err := r.js.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
		fetchOne(next)
		hop = append(hop, time.Since(t0))
	}
	b.StopTimer()
	p := percentileUs
	b.ReportMetric(p(raw, 0.5), "raw-p50-us")
	b.ReportMetric(p(raw, 0.95), "raw-p95-us")
	b.ReportMetric(p(hop, 0.5), "hop-p50-us")
	b.ReportMetric(p(hop, 0.95), "hop-p95-us")
	b.ReportMetric(p(hop, 0.5)/p(raw, 0.5), "p50-ratio")
}

// BenchmarkResultReport times what a worker waits for per result message under each way of reporting results
// (docs/faults.md, "Results at least once"): a plain publish (nothing: at most once), a request the frontend answers
// (the choice: report), and a publish acknowledged by a JetStream stream of results in memory or on file (the
// alternative, before the frontend's consumer delivers it, which is not counted). 512 bytes: a leaf with a small
// output.
func BenchmarkResultReport(b *testing.B) {
	srv := testrig.Server(b)
	nc, fe := srv.Connect(b, "worker"), srv.Connect(b, "frontend")
	ctx := context.Background()
	if _, err := fe.Subscribe("bench.result", func(m *nats.Msg) {
		if m.Reply != "" {
			_ = m.Respond(nil)
		}
	}); err != nil {
		b.Fatal(err)
	}
	if err := fe.Flush(); err != nil {
		b.Fatal(err)
	}
	js := testrig.JetStream(b, nc)
	for name, st := range map[string]jetstream.StorageType{"memory": jetstream.MemoryStorage,
		"file": jetstream.FileStorage} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RESULTS_" + name,
			Subjects: []string{"bench.js." + name}, Storage: st, MaxAge: time.Minute}); err != nil {
			b.Fatal(err)
		}
	}
	payload := make([]byte, 512)
	b.Run("publish", func(b *testing.B) {
		for b.Loop() {
			if err := nc.Publish("bench.result", payload); err != nil {
				b.Fatal(err)
			}
		}
		_ = nc.Flush()
	})
	b.Run("request", func(b *testing.B) {
		for b.Loop() {
			if _, err := nc.Request("bench.result", payload, time.Second); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, name := range []string{"memory", "file"} {
		b.Run("jetstream-"+name, func(b *testing.B) {
			for b.Loop() {
				if _, err := js.Publish(ctx, "bench.js."+name, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
