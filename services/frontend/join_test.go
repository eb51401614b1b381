package frontend

import (
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// joinSystem is the planner, four workers and a frontend serving pkg/hop/testdata/join.yaml with the captioner's latency
// capMs.
func joinSystem(t *testing.T, capMs string, cfg Config) (*pipeline.Spec, *Frontend, *testrig.Client) {
	t.Helper()
	text, err := os.ReadFile("../../pkg/hop/testdata/join.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := pipeline.Parse([]byte(strings.ReplaceAll(string(text), "CAP_MS", capMs)))
	if err != nil {
		t.Fatal(err)
	}
	s := startSystemOf(t, spec, 4)
	cfg.ID = "fe"
	f, _ := s.startFrontend(t, cfg)
	return spec, f, s.newClient(t)
}

// lastTask is the task of a leaf's last hop.
func lastTask(t *testing.T, it wire.ItemResult) string {
	t.Helper()
	if len(it.Path) == 0 {
		return ""
	}
	k, err := wire.ParseVariantKey(it.Path[len(it.Path)-1])
	if err != nil {
		t.Fatal(err)
	}
	return k.Task
}

// TestJoinCompletesOnce: every image's detector and captioner outputs are joined into one item of the merge task,
// which runs once: each request gets one reply, ok, with the merge's leaf (the first part's weight, a half) and the
// other branch's part (a half); and the frontend holds no part afterwards.
func TestJoinCompletesOnce(t *testing.T) {
	spec, f, c := joinSystem(t, "5", Config{})
	var subjects []string
	for range 10 {
		// A deadline far off: under -race on a busy machine (load average 18) a 5 s one was missed.
		subjects = append(subjects, c.Send(t, spec.Name, goodRequest(t), nats.Header{wire.HeaderTimeout: []string{"30s"}}))
	}
	replies := c.Wait(t, subjects, 40*time.Second)
	c.ExpectOneReply(t, subjects, 300*time.Millisecond)
	for _, subj := range subjects {
		rep := decodeReply(t, replies[subj][0])
		tasks := map[string]int{}
		for _, it := range rep.Results {
			if it.Den != 2 || it.Status != wire.ItemOK || len(it.Outputs) == 0 {
				t.Errorf("request %s: leaf %+v, want ok with outputs, weight 1/2", rep.RequestID, it)
			}
			tasks[lastTask(t, it)]++
		}
		if rep.Status != wire.StatusOK || len(rep.Results) != 2 || tasks["merge"] != 1 || tasks["det"]+tasks["cap"] != 1 {
			t.Errorf("request %s: %s, leaves by task %v, want ok: merge once and one branch's part", rep.RequestID,
				rep.Status, tasks)
		}
	}
	if st := f.Stats(); st.JoinParts != 0 || st.JoinFailures != 0 || st.BadReports != 0 {
		t.Errorf("stats %+v: want no part held, no failure, no bad report", st)
	}
}

// TestJoinPartialAndBounded: the captioner takes 10 s, past the requests' 2 s deadlines (which leave the detector's
// milliseconds room on a busy machine: at 400 ms, under a load average of 19, no part arrived in time). A flood of 120 requests
// on a frontend that holds 30 at once: each request accepted holds its detector's part, one at most, so the parts
// held never exceed 30; at its deadline the join closes with what arrived, and the reply is partial: the detector's
// part ok, the captioner's dropped at the deadline (unless nothing arrived in time: late). Once answered, no part is
// held.
func TestJoinPartialAndBounded(t *testing.T) {
	const inFlight = 30
	// Without admission control: a captioner past the deadline puts the plan's fastest path past it, and the gate
	// would refuse every request for it (docs/admission.md), where this test is of the join's bounds.
	spec, f, c := joinSystem(t, "10000", Config{MaxInFlight: inFlight, NoAdmission: true})
	var most atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			most.Store(max(most.Load(), f.Stats().JoinParts))
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var subjects []string
	for range 120 {
		subjects = append(subjects, c.Send(t, spec.Name, goodRequest(t), nats.Header{wire.HeaderTimeout: []string{"2s"}}))
	}
	replies := c.Wait(t, subjects, 30*time.Second)
	close(stop)
	<-done
	partial := 0
	for _, subj := range subjects {
		rep := decodeReply(t, replies[subj][0])
		if rep.Status == wire.StatusOverloaded || rep.Status == wire.StatusError ||
			rep.Status == wire.StatusLate && len(rep.Results) == 0 {
			continue // refused (the frontend held its limit), or not even the detector was in time (a busy machine)
		}
		partial++
		var ok, dropped int
		for _, it := range rep.Results {
			switch {
			case it.Status == wire.ItemOK && lastTask(t, it) == "det":
				ok++
			case it.Status == wire.ItemDropped && it.Reason == wire.DropDeadline && it.Den == 2:
				dropped++
			}
		}
		if rep.Status != wire.StatusPartial || ok != 1 || dropped != 1 || len(rep.Results) != 2 {
			t.Errorf("request %s: %s with %+v, want partial: the detector's part and the captioner's dropped",
				rep.RequestID, rep.Status, rep.Results)
		}
	}
	if partial == 0 || most.Load() == 0 || most.Load() > inFlight {
		t.Errorf("%d partial replies; at most %d parts held, want some and at most %d", partial, most.Load(), inFlight)
	}
	testrig.Eventually(t, 5*time.Second, "no part held", func() bool { return f.Stats().JoinParts == 0 })
}
