package frontend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// passSpec is one leaf task whose replicas pass each item through (echo): the benchmarks measure the frontend and
// the data plane, not a model.
const passSpec = `
name: pass
slo_ms: 5000
batch_sizes: [1, 8]
tasks:
  - name: a
    variants:
      - name: x
        accuracy: 0.9
        executor: {kind: emulated}
        profile: [{batch: 1, p50_ms: 1, p95_ms: 1}, {batch: 8, p50_ms: 1, p95_ms: 1}]
allocation:
  - {task: a, variant: x, replicas: 6, max_batch: 8}
`

// echo is an executor that takes no time and answers each item with its inputs.
type echo struct{}

func (echo) Execute(_ context.Context, batch []executor.Input) ([]executor.Output, error) {
	out := make([]executor.Output, len(batch))
	for i, in := range batch {
		out[i].Tensors = in.Tensors
	}
	return out, nil
}
func (echo) Close() error { return nil }

// benchSystem is a nats-server process (so that the benchmark process's memory is the services' and the client's,
// not the server's stored messages), the planner with passSpec, `workers` echo workers, and one frontend.
type benchSystem struct {
	url string
	fe  *Frontend
}

func startBenchSystem(b *testing.B, workers int, cfg Config) *benchSystem {
	b.Helper()
	srv, err := natsproc.Start(natsproc.Config{Name: "frontend-bench"})
	if err != nil {
		b.Skip(err)
	}
	b.Cleanup(srv.Stop)
	connect := func(name string) *nats.Conn {
		nc, err := nats.Connect(srv.URL(), nats.Name(name))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	spec, err := pipeline.Parse([]byte(passSpec))
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	pl, err := planner.New(connect("planner"), planner.Config{Pipelines: []*pipeline.Spec{spec},
		Storage: jetstream.MemoryStorage, System: "static", Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	testrig.Run(b, "planner", pl.Run)
	// Each service's goroutines (its connection's among them) under a pprof label, so that a CPU profile tells the
	// frontend's share from the workers' and the client's (docs/measurements.md).
	var ws []*worker.Worker
	pprof.Do(context.Background(), pprof.Labels("proc", "worker"), func(context.Context) {
		for i := range workers {
			id := fmt.Sprint("w", i)
			w, err := worker.New(connect(id), worker.Config{ID: id, Logger: quiet,
				NewExecutor: func(*pipeline.Spec, string, string, executor.Options) (executor.Executor, error) {
					return echo{}, nil
				}})
			if err != nil {
				b.Fatal(err)
			}
			ws = append(ws, w)
			testrig.Run(b, "worker "+id, w.Run)
		}
	})
	testrig.Eventually(b, 20*time.Second, "the workers serve", func() bool {
		for _, w := range ws {
			if w.Serving() == "" {
				return false
			}
		}
		return true
	})
	cfg.ID, cfg.Logger = "fe", quiet
	var fe *Frontend
	pprof.Do(context.Background(), pprof.Labels("proc", "frontend"), func(context.Context) {
		fe, _ = startServing(b, connect("frontend"), cfg)
	})
	return &benchSystem{url: srv.URL(), fe: fe}
}

// closedLoop sends n requests to subject from c concurrent clients, each waiting for its reply before the next,
// and returns how long they took; with check, fail is called on a reply that is not an ok InferReply.
func closedLoop(nc *nats.Conn, subject string, data []byte, n, c int, check bool, fail func(error)) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				m, err := nc.Request(subject, data, 10*time.Second)
				if err != nil {
					fail(err)
					return
				}
				if check {
					var rep wire.InferReply
					if err := msgpack.Unmarshal(m.Data, &rep); err != nil || rep.Status != wire.StatusOK {
						fail(fmt.Errorf("reply %q: status %q, %v", m.Data, rep.Status, err))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// bareResponder is the baseline: the trips a request makes through Sleipnir, done bare. A request's intake (as many
// goroutines as the frontend's) publishes it to a JetStream work queue with the headers the design needs
// (Sleipnir-Deadline and a Nats-Msg-Id) and waits for the acknowledgement; one of `workers` goroutines pulls it as a worker does (one pull request
// at a time, and up to 8 at once when more are pending), sends each payload back to the intake's result subject as a
// request, and acknowledges it once that is confirmed, beside the next pull; the result's handler confirms it and replies to the client. No
// decoding, validation, admission, batching, routing or accounting.
func bareResponder(b *testing.B, url string, workers int) string {
	b.Helper()
	connect := func(name string) *nats.Conn {
		nc, err := nats.Connect(url, nats.Name(name))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	nc := connect("bare")
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BARE", Subjects: []string{"bare.task"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage, Duplicates: 2 * time.Minute}); err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "BARE", jetstream.ConsumerConfig{Durable: "w",
		AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		b.Fatal(err)
	}
	var clients sync.Map // request id -> the client's reply subject
	if _, err := nc.Subscribe("bare.result", func(m *nats.Msg) {
		_ = m.Respond(nil)
		if to, ok := clients.LoadAndDelete(m.Header.Get(wire.HeaderMsgID)); ok {
			_ = nc.Publish(to.(string), m.Data[:min(len(m.Data), 16)])
		}
	}); err != nil {
		b.Fatal(err)
	}
	reqs := make(chan *nats.Msg, DefaultRequestBacklog)
	sub, err := nc.ChanSubscribe("bare.infer", reqs)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe(); close(reqs) })
	var n atomic.Int64
	for range DefaultIntakeWorkers {
		go func() {
			for m := range reqs {
				id := fmt.Sprint("bare-", n.Add(1))
				clients.Store(id, m.Reply)
				task := nats.NewMsg("bare.task")
				task.Data = m.Data
				task.Header.Set(wire.HeaderDeadline, wire.FormatDeadline(time.Now().Add(5*time.Second)))
				task.Header.Set(wire.HeaderMsgID, id)
				if _, err := js.PublishMsg(ctx, task); err != nil {
					clients.Delete(id) // the client times out and the benchmark fails
				}
			}
		}()
	}
	for i := range workers {
		wc := connect(fmt.Sprint("bare-w", i))
		wjs, err := wc.JetStream()
		if err != nil {
			b.Fatal(err)
		}
		pull, err := wjs.PullSubscribe("bare.task", "w", nats.Bind("BARE", "w"))
		if err != nil {
			b.Fatal(err)
		}
		more, err := jetstream.New(wc)
		if err != nil {
			b.Fatal(err)
		}
		consumer, err := more.Consumer(ctx, "BARE", "w")
		if err != nil {
			b.Fatal(err)
		}
		answer := func(data []byte, id string, ack func() error) {
			res := nats.NewMsg("bare.result")
			res.Data = data
			res.Header.Set(wire.HeaderMsgID, id)
			if _, err := wc.RequestMsg(res, 5*time.Second); err == nil {
				_ = ack()
			}
		}
		go func() {
			for {
				ms, err := pull.Fetch(1, nats.MaxWait(time.Second))
				if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubscription) {
					return
				}
				if len(ms) == 0 {
					continue
				}
				// As a worker batches: up to 8, the rest taken without waiting when more are pending; each answered
				// beside the next batch.
				m := ms[0]
				go answer(m.Data, m.Header.Get(wire.HeaderMsgID), func() error { return m.Ack() })
				if md, err := m.Metadata(); err == nil && md.NumPending > 0 {
					if batch, err := consumer.FetchNoWait(int(min(md.NumPending, 7))); err == nil {
						for m := range batch.Messages() {
							go answer(m.Data(), m.Headers().Get(wire.HeaderMsgID), m.Ack)
						}
					}
				}
			}
		}()
	}
	return "bare.infer"
}

// BenchmarkFrontendThroughput: the requests per second one frontend carries end to end (intake, the root task's
// publish, an echo worker's batch and report, the reply) from 64 concurrent clients, against the bare path making
// the same trips (bareResponder, with as many workers) on the same server, interleaved in rounds so that both see
// the same machine. Reported: each rate and their ratio (issue 48's goal: at least 0.5).
//
//	go test -run '^$' -bench BenchmarkFrontendThroughput -benchtime 20000x -count 3 ./services/frontend/
func BenchmarkFrontendThroughput(b *testing.B) {
	const workers = 6
	sys := startBenchSystem(b, workers, Config{})
	client, err := nats.Connect(sys.url, nats.Name("client"))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	var bare string
	pprof.Do(context.Background(), pprof.Labels("proc", "bare"), func(context.Context) {
		bare = bareResponder(b, sys.url, workers)
	})
	data := goodRequest(b)
	fail := func(err error) { b.Error(err) }
	const rounds, clients = 4, 64
	per := max(1, b.N/rounds)
	closedLoop(client, wire.InferSubject("pass"), data, 200, clients, true, fail) // warm both paths
	closedLoop(client, bare, data, 200, clients, false, fail)
	b.ResetTimer()
	var sleipnir, baseline time.Duration
	for range rounds {
		sleipnir += closedLoop(client, wire.InferSubject("pass"), data, per, clients, true, fail)
		baseline += closedLoop(client, bare, data, per, clients, false, fail)
	}
	b.StopTimer()
	n := float64(per * rounds)
	b.ReportMetric(n/sleipnir.Seconds(), "req/s")
	b.ReportMetric(n/baseline.Seconds(), "bare-req/s")
	b.ReportMetric(baseline.Seconds()/sleipnir.Seconds(), "ratio")
}

// BenchmarkFrontendInFlightMemory: the heap one frontend (with its planner, in the same process) holds for 10,000
// requests in flight: no worker serves, so every request waits in the frontend until its deadline. Reported: the
// heap after a collection with them held, less the heap before, per 10,000 (issue 39's goal: under 30 MB). The
// client sends them from this process too, with one reply subscription for all (its share is a few bytes each).
//
//	go test -run '^$' -bench BenchmarkFrontendInFlightMemory -benchtime 1x -count 3 ./services/frontend/
func BenchmarkFrontendInFlightMemory(b *testing.B) {
	const inFlight = 10000
	sys := startBenchSystem(b, 0, Config{MaxInFlight: 2 * inFlight, RequestBacklog: 2 * inFlight, IntakeQueue: 2 * inFlight})
	client, err := nats.Connect(sys.url, nats.Name("client"))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	var replies atomic.Int64
	if _, err := client.Subscribe("bench.reply.>", func(*nats.Msg) { replies.Add(1) }); err != nil {
		b.Fatal(err)
	}
	data := goodRequest(b)
	var perTenK float64
	for round := range b.N {
		heapBefore := heapInUse()
		// A deadline past the measurement: they are still held when it is taken, and answered soon after.
		hdr := nats.Header{}
		hdr.Set(wire.HeaderTimeout, "4s")
		for i := range inFlight {
			m := &nats.Msg{Subject: wire.InferSubject("pass"), Reply: fmt.Sprintf("bench.reply.%d.%d", round, i),
				Header: hdr, Data: data}
			if err := client.PublishMsg(m); err != nil {
				b.Fatal(err)
			}
		}
		testrig.Eventually(b, 20*time.Second, "every request held", func() bool {
			return sys.fe.Stats().InFlight == inFlight
		})
		perTenK += float64(heapInUse()-heapBefore) / (1 << 20) * 10000 / inFlight
		want := int64(inFlight * (round + 1))
		testrig.Eventually(b, 30*time.Second, "every request answered", func() bool { return replies.Load() == want })
	}
	b.ReportMetric(perTenK/float64(b.N), "MB/10k-in-flight")
}

// heapInUse is the heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
