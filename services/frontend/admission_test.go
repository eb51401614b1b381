package frontend

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
// --servers 3 --demand 190` without the planner's headroom: 114), so that it plans in mode overloaded. The gate does
// not read the plan's figure; what it refuses it learns from the answers to the bursts the tests send.
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
	reportDemand(t, s.connect(t, "elsewhere"), spec.Name, overloadedDemand)
	return s
}

// startGated starts a frontend and waits until it follows an overloaded plan, which it returns.
func (s *testSystem) startGated(t *testing.T, id string) (*Frontend, *plan.Allocation) {
	f, _ := s.startFrontend(t, Config{ID: id})
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

// burstQPS and burstLength: the tests' bursts, about three times what the 3 workers serve, long enough for the
// first answers late to make the pipeline congested and the gate bound it.
const (
	burstQPS    = 300
	burstLength = 3 * time.Second
)

// sendBurst sends the requests with the headers in turn, paced at burstQPS, and returns their reply subjects.
func sendBurst(t *testing.T, s *testSystem, c *testrig.Client, hdrs ...nats.Header) [][]string {
	subjects := make([][]string, len(hdrs))
	gap := time.Second / burstQPS
	start := time.Now()
	for i := 0; time.Since(start) < burstLength; i++ {
		k := i % len(hdrs)
		subjects[k] = append(subjects[k], c.Send(t, s.spec.Name, goodRequest(t), hdrs[k]))
		time.Sleep(time.Until(start.Add(time.Duration(i+1) * gap)))
	}
	return subjects
}

// TestCongestionRefusesAtOnce: a burst at three times what the plan's workers serve makes the pipeline miss
// deadlines, and from then on the frontend refuses what is beyond what the workers answer, at once: status overloaded
// (NATS, with the micro error code 429), or HTTP 429 with Retry-After for a request whose deadline the fastest path
// cannot meet. The refused are never published: the root task's subjects carry exactly the admitted ones.
func TestCongestionRefusesAtOnce(t *testing.T) {
	s := startOverloaded(t)
	f, _ := s.startGated(t, "fa")
	rootTasks := watchRootTasks(t, s)
	c := s.newClient(t)
	subjects := sendBurst(t, s, c, nats.Header{})[0]
	replies := c.Wait(t, subjects, 10*time.Second)
	overloaded, gated, admitted, late := 0, 0, 0, 0
	var waits []time.Duration // the refusals' latencies
	for _, subj := range subjects {
		m := replies[subj][0]
		switch rep := decodeReply(t, m); rep.Status {
		case wire.StatusOverloaded:
			overloaded++
			if m.Header.Get(wire.HeaderServiceErrorCode) != "429" {
				t.Errorf("refusal %q, %s %q; want code 429", rep.Error, wire.HeaderServiceErrorCode,
					m.Header.Get(wire.HeaderServiceErrorCode))
			}
			if !strings.Contains(rep.Error, "overloaded: pipeline traffic has") {
				continue // the frontend's own bounds (a slow machine: the intake), not the gate
			}
			gated++
			waits = append(waits, c.Latency(subj))
		case wire.StatusError:
			t.Errorf("reply %q %q, want it admitted or overloaded", rep.Status, rep.Error)
		default:
			admitted++
			if rep.Status != wire.StatusOK {
				late++
			}
		}
	}
	t.Logf("%d refused (%d by admission control), %d admitted (%d not ok)", overloaded, gated, admitted, late)
	if gated == 0 || overloaded > len(subjects)*9/10 {
		t.Errorf("%d of %d refused, %d by admission control: want some by it, from the first violations on, not "+
			"nearly all", overloaded, len(subjects), gated)
	}
	// None refused published (on a busy machine some admitted are answered by the frontend before it publishes
	// them: late in its intake).
	if published := rootTasks(); published > uint64(admitted) || published == 0 {
		t.Errorf("%d root task messages published; want at most the %d admitted, none of the %d refused", published,
			admitted, overloaded)
	}
	// How soon: logged, not checked (a busy machine's scheduling decides it; docs/admission.md has the p99). What
	// makes a refusal at once is that it is decided before the request is published, checked above.
	slices.Sort(waits)
	if len(waits) > 0 {
		t.Logf("refusals' latency: median %v, slowest %v", waits[len(waits)/2], waits[len(waits)-1])
	}

	srv := httptest.NewServer(f.Handler())
	defer srv.Close()
	codes := postConcurrently(t, srv.URL+"/v2/models/"+s.spec.Name+"/infer", 4, map[string]string{
		wire.HeaderTimeout: "5ms"})
	if codes[http.StatusTooManyRequests] != 4 {
		t.Errorf("HTTP statuses %v of requests with 5 ms to their deadline, want 429 (with %s)", codes,
			wire.HeaderRetryAfter)
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
// numbers in a burst that congests the pipeline: the lower class is refused first (class 5 asks for about half of
// what the pipeline answers or more, so class 1 may fill the bound only in part, if at all). A class above the pipeline's, or one that
// is not a class, is refused as a bad request.
func TestPriorityHeader(t *testing.T) {
	s := startOverloaded(t)
	s.startGated(t, "fp")
	c := s.newClient(t)
	bad := map[string]string{"6": "above pipeline traffic's class 5", "high": "want a class from 0 to 9",
		"-1": "want a class from 0 to 9"}
	badSubjects := map[string]string{}
	for v := range bad {
		badSubjects[v] = c.Send(t, s.spec.Name, goodRequest(t), nats.Header{wire.HeaderPriority: []string{v}})
	}
	sent := sendBurst(t, s, c, nats.Header{}, nats.Header{wire.HeaderPriority: []string{"1"}})
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
	// The second half of the burst: the first, before the first answers late, admits both classes alike.
	half := func(subjects []string) []string { return subjects[len(subjects)/2:] }
	ro, rl := refused(half(sent[0])), refused(half(sent[1]))
	ao, al := len(half(sent[0]))-ro, len(half(sent[1]))-rl
	t.Logf("second half of the burst, admitted: class %d %d of %d, class 1 %d of %d", pipelineClass, ao,
		len(half(sent[0])), al, len(half(sent[1])))
	// The higher class admitted at least twice as many (when it alone is more than the workers answer, as on a
	// slow machine, both are refused, the lower one nearly whole).
	if rl == 0 || ao < 2*al {
		t.Errorf("admitted: class %d %d, class 1 %d: want the lower class refused first, the higher admitted at "+
			"least twice as many", pipelineClass, ao, al)
	}
	for v, subj := range badSubjects {
		rep := decodeReply(t, c.Wait(t, []string{subj}, 5*time.Second)[subj][0])
		if rep.Status != wire.StatusError || !strings.Contains(rep.Error, bad[v]) {
			t.Errorf("%s %q: reply %q %q, want error saying %q", wire.HeaderPriority, v, rep.Status, rep.Error, bad[v])
		}
	}
}
