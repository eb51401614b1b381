package frontend

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// pipelineClass is the priority class the admission tests give their pipeline.
const pipelineClass = 5

// overloadedDemand is the demand, in requests a second, that the admission tests report to the planner: about twice
// what the planner finds 3 workers serve (94 requests a second; `sleipnir plan --pipeline examples/traffic.yaml
// --servers 3 --demand 190` without the planner's headroom: 114), so that it plans in mode overloaded and serves
// about half.
const overloadedDemand = 190

// startOverloaded starts the planner (loki) on traffic, whose emulated models cost nothing, with class pipelineClass,
// 3 workers, and demand reports of overloadedDemand requests a second (another frontend's, as it would send them) until
// the test ends: the plan serves a small share of the demand.
func startOverloaded(t *testing.T) *testSystem {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec.Priority = pipelineClass
	logs := &countingHandler{counts: map[string]int{}}
	s := &testSystem{srv: testrig.Server(t), spec: spec, logs: logs, log: slog.New(logs)}
	pl, err := planner.New(s.connect(t, "planner"), planner.Config{Pipelines: []*pipeline.Spec{spec},
		Storage: jetstream.MemoryStorage, Logger: s.log})
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "planner", pl.Run)
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("w%02d", i)
		w, err := worker.New(s.connect(t, id), worker.Config{ID: id, Logger: s.log})
		if err != nil {
			t.Fatal(err)
		}
		testrig.Run(t, "worker "+id, w.Run)
	}
	nc := s.connect(t, "elsewhere")
	testrig.Run(t, "demand reports", func(ctx context.Context) error {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			data, _ := msgpack.Marshal(&wire.DemandReport{Frontend: "elsewhere", Count: overloadedDemand / 5,
				IntervalMs: 200})
			if err := nc.Publish(wire.DemandSubject(spec.Name), data); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
	})
	return s
}

// startGated starts a frontend and waits until it follows an overloaded plan, which it returns.
func (s *testSystem) startGated(t *testing.T, id string) (*Frontend, *plan.Allocation) {
	f, _ := s.startFrontend(t, Config{ID: id, Admit: true})
	var a *plan.Allocation
	testrig.Eventually(t, 20*time.Second, "the frontend follows an overloaded plan", func() bool {
		_, p := f.lookup(s.spec.Name)
		if p != nil && p.Mode == plan.ModeOverloaded && p.Allocation != nil {
			a = p.Allocation
		}
		return a != nil
	})
	return f, a
}

// TestOverloadedPlanRefusesTheExcess: the plan serves about half the requests a second the planner estimated, so
// the frontend admits about half of what it sees and refuses the rest at once, status overloaded (NATS, with the micro
// error code 429) or HTTP 429 with Retry-After. The refused are never published: the root task's subjects carry
// exactly the admitted ones.
func TestOverloadedPlanRefusesTheExcess(t *testing.T) {
	s := startOverloaded(t)
	f, a := s.startGated(t, "fa")
	t.Logf("plan: serves %.1f of %.1f requests a second", a.ServedQPS, a.Estimate())
	rootTasks := watchRootTasks(t, s)
	c := s.newClient(t)
	const n, timeout = 200, 3 * time.Second
	hdr := nats.Header{wire.HeaderTimeout: []string{timeout.String()}}
	var subjects []string
	for i := 0; i < n; i++ {
		subjects = append(subjects, c.Send(t, s.spec.Name, goodRequest(t), hdr))
	}
	replies := c.Wait(t, subjects, timeout+5*time.Second)
	overloaded, admitted := 0, 0
	for _, subj := range subjects {
		m := replies[subj][0]
		switch rep := decodeReply(t, m); rep.Status {
		case wire.StatusOverloaded:
			overloaded++
			if !strings.Contains(rep.Error, "overloaded: the plan serves") ||
				m.Header.Get(wire.HeaderServiceErrorCode) != "429" {
				t.Errorf("refusal %q, %s %q; want it to say what the plan serves, code 429", rep.Error,
					wire.HeaderServiceErrorCode, m.Header.Get(wire.HeaderServiceErrorCode))
			}
			if d := c.Latency(subj); d > timeout/2 {
				t.Errorf("a refusal came after %v, not at once", d)
			}
		case wire.StatusError:
			t.Errorf("reply %q %q, want it admitted or overloaded", rep.Status, rep.Error)
		default:
			admitted++
		}
	}
	t.Logf("%d refused, %d admitted", overloaded, admitted)
	// A share 1-served/estimate refused at random: 30 is over 4 standard deviations; the frontend's own demand
	// reports raise the estimate a little while it runs (and so the share refused).
	if want := (1 - a.ServedQPS/a.Estimate()) * n; float64(overloaded) < want-30 || float64(overloaded) > want+40 {
		t.Errorf("%d of %d refused, want about %.0f: the plan serves %.1f of %.1f", overloaded, n, want, a.ServedQPS,
			a.Estimate())
	}
	if published := rootTasks(); published != uint64(admitted) {
		t.Errorf("%d root task messages published; want the %d admitted, none of the %d refused", published, admitted,
			overloaded)
	}

	// The burst above raised the demand the planner estimates, and maybe the share its next plan refuses: the
	// HTTP requests are held to the plan in force when they are sent.
	refusedShare := func() float64 {
		_, p := f.lookup(s.spec.Name)
		return 1 - p.Allocation.ServedQPS/p.Allocation.Estimate()
	}
	before := refusedShare()
	srv := httptest.NewServer(f.Handler())
	defer srv.Close()
	const posts = 40
	codes := postConcurrently(t, srv.URL+"/v2/models/"+s.spec.Name+"/infer", posts, map[string]string{
		wire.HeaderTimeout: timeout.String()})
	after := refusedShare() // a plan published meanwhile: either one's share holds
	lo, hi := min(before, after), max(before, after)
	// Four standard deviations of the binomial count.
	sd := func(p float64) float64 { return 4 * math.Sqrt(posts*p*(1-p)) }
	if got := float64(codes[http.StatusTooManyRequests]); got < lo*posts-sd(lo) || got > hi*posts+sd(hi) || got == 0 {
		t.Errorf("HTTP statuses %v, want %.0f%%-%.0f%% of %d 429 (with %s), the plan in force's share", codes,
			100*lo, 100*hi, posts, wire.HeaderRetryAfter)
	}
}

// postConcurrently posts n infer requests at once with the headers, and counts their statuses; a 429 without
// Retry-After counts as 0.
func postConcurrently(t *testing.T, url string, n int, hdr map[string]string) map[int]int {
	var mu sync.Mutex
	var wg sync.WaitGroup
	codes := map[int]int{}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, url,
				strings.NewReader(`{"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 1.5]}]}`))
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			code := resp.StatusCode
			if code == http.StatusTooManyRequests && resp.Header.Get(wire.HeaderRetryAfter) == "" {
				code = 0
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return codes
}

// TestPriorityHeader: requests of the pipeline's class (5) and of a lower one (1, by Sleipnir-Priority) come in equal
// numbers to a plan that serves half: the pipeline's class is admitted first and the lower one refused. A class above
// the pipeline's, or one that is not a class, is refused as a bad request.
func TestPriorityHeader(t *testing.T) {
	s := startOverloaded(t)
	_, a := s.startGated(t, "fp")
	t.Logf("plan: serves %.1f of %.1f requests a second", a.ServedQPS, a.Estimate())
	c := s.newClient(t)
	const n = 100
	low := nats.Header{wire.HeaderTimeout: []string{"3s"}, wire.HeaderPriority: []string{"1"}}
	own := nats.Header{wire.HeaderTimeout: []string{"3s"}}
	var lows, owns []string
	for i := 0; i < n; i++ {
		owns = append(owns, c.Send(t, s.spec.Name, goodRequest(t), own))
		lows = append(lows, c.Send(t, s.spec.Name, goodRequest(t), low))
	}
	bad := map[string]string{"6": "above pipeline traffic's class 5", "high": "want a class from 0 to 9",
		"-1": "want a class from 0 to 9"}
	badSubjects := map[string]string{}
	for v := range bad {
		badSubjects[v] = c.Send(t, s.spec.Name, goodRequest(t), nats.Header{wire.HeaderPriority: []string{v}})
	}
	refused := func(subjects []string) int {
		n := 0
		for subj, ms := range c.Wait(t, subjects, 10*time.Second) {
			if rep := decodeReply(t, ms[0]); rep.Status == wire.StatusOverloaded {
				n++
			} else if rep.Status == wire.StatusError {
				t.Errorf("%s: reply %q %q, want it admitted or overloaded", subj, rep.Status, rep.Error)
			}
		}
		return n
	}
	ro, rl := refused(owns), refused(lows)
	t.Logf("refused: class %d %d of %d, class 1 %d of %d", pipelineClass, ro, n, rl, n)
	// Half the requests are of each class: the pipeline's class is admitted up to twice the share served, the
	// lower one what is left. 20 is 4 standard deviations.
	share := a.ServedQPS / a.Estimate()
	if want := (1 - min(1, 2*share)) * n; float64(ro) > want+20 {
		t.Errorf("class %d: %d of %d refused, want about %.0f: it is served first", pipelineClass, ro, n, want)
	}
	if want := (1 - max(0, 2*share-1)) * n; float64(rl) < want-20 {
		t.Errorf("class 1: %d of %d refused, want about %.0f: the higher class takes the share served", rl, n, want)
	}
	for v, subj := range badSubjects {
		rep := decodeReply(t, c.Wait(t, []string{subj}, 5*time.Second)[subj][0])
		if rep.Status != wire.StatusError || !strings.Contains(rep.Error, bad[v]) {
			t.Errorf("%s %q: reply %q %q, want error saying %q", wire.HeaderPriority, v, rep.Status, rep.Error, bad[v])
		}
	}
}
