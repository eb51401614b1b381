package frontend

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
)

// TestCrashLoopIsAnsweredError: a request whose root message every worker that takes it dies holding (played by
// testrig.DieHolding, bus.SetAsideAt-1 times) is answered error as soon as the next worker sets the message aside,
// long before its deadline, exactly once; the system goes on serving.
func TestCrashLoopIsAnsweredError(t *testing.T) {
	s := startTestSystem(t, 0, func(c *planner.Config) { c.AckWait = 200 * time.Millisecond })
	s.startFrontend(t, Config{ID: "fe1"})
	c := s.newClient(t)
	hdr := nats.Header{}
	hdr.Set(wire.HeaderTimeout, "30s")
	poison := c.Send(t, s.spec.Name, goodRequest(t), hdr)
	// The root message is in its variant's queue: no worker runs yet.
	js := testrig.JetStream(t, s.connect(t, "observer"))
	stream, err := js.Stream(context.Background(), wire.TaskStream(s.spec.Name))
	if err != nil {
		t.Fatal(err)
	}
	var subject string
	testrig.Eventually(t, 5*time.Second, "the root message enqueued", func() bool {
		m, err := stream.GetLastMsgForSubject(context.Background(), wire.TaskSubjects(s.spec.Name))
		if err == nil {
			subject = m.Subject
		}
		return err == nil
	})
	root := s.spec.Root()
	var consumer string
	for _, v := range root.Variants {
		if wire.TaskSubject(s.spec.Name, root.Name, v.Name) == subject {
			consumer = wire.Consumer(root.Name, v.Name)
		}
	}
	for i := 1; i < bus.SetAsideAt; i++ {
		nc := s.connect(t, fmt.Sprint("crashing-", i))
		testrig.DieHolding(t, nc, wire.TaskStream(s.spec.Name), consumer, 10*time.Second)
	}
	p, err := plan.Static(s.spec)
	if err != nil {
		t.Fatal(err)
	}
	s.addWorkers(t, p.Servers())
	rep := decodeReply(t, c.Wait(t, []string{poison}, 15*time.Second)[poison][0])
	if rep.Status != wire.StatusError || !strings.Contains(rep.Error, "set aside") {
		t.Fatalf("the poison request got %q %q, want error: set aside", rep.Status, rep.Error)
	}
	// With a deadline a busy machine cannot miss: the point is that it is served, not how fast.
	after := c.Send(t, s.spec.Name, goodRequest(t), hdr)
	if rep := decodeReply(t, c.Wait(t, []string{after}, 30*time.Second)[after][0]); rep.Status != wire.StatusOK {
		t.Fatalf("a request after the poison got %q %q, want ok", rep.Status, rep.Error)
	}
	c.ExpectOneReply(t, []string{poison, after}, time.Second)
}
