package up

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
)

// TestMicroServices: under the deployment's permissions (a real nats-server with deploy/nats-auth.conf), what `nats
// micro list|info|stats` asks through the micro API ($SRV.PING, $SRV.INFO, $SRV.STATS) finds the frontend with an
// infer endpoint per pipeline, counting requests and errors; the planner and each worker with a status endpoint that
// answers; and an error reply carries micro's error headers. No service is refused a subject.
func TestMicroServices(t *testing.T) {
	s, seeds := deployServer(t)
	d := startDeployed(t, s.URL(), seeds, jetstream.MemoryStorage)
	client, _ := connectAs(t, s.URL(), seeds, auth.User{Role: auth.Client})
	for range 2 {
		reply, err := client.Request(wire.InferSubject(d.spec.Name), inputRequest(t), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rep := decodeReply(t, reply); rep.Status != wire.StatusOK {
			t.Fatalf("reply %q (%s), want ok", rep.Status, rep.Error)
		}
	}
	bad := nats.NewMsg(wire.InferSubject(d.spec.Name))
	bad.Header.Set(wire.HeaderContentType, wire.ContentJSON)
	bad.Data = []byte(`{"inputs": []}`)
	reply, err := client.RequestMsg(bad, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := reply.Header.Get(wire.HeaderServiceErrorCode); got != "400" {
		t.Errorf("error reply's %s %q, want 400", wire.HeaderServiceErrorCode, got)
	}
	if got := reply.Header.Get(wire.HeaderServiceError); got == "" || got != reply.Header.Get(wire.HeaderError) {
		t.Errorf("error reply's %s %q, want its error text %q", wire.HeaderServiceError, got, reply.Header.Get(wire.HeaderError))
	}

	observer, observerV := connectAs(t, s.URL(), seeds, auth.User{Role: auth.Observer})
	pings := map[string]int{}
	for _, data := range gatherReplies(t, observer, micro.PingVerb, "") {
		var p micro.Ping
		if err := json.Unmarshal(data, &p); err != nil || p.Type != micro.PingResponseType {
			t.Fatalf("ping reply %s: %v", data, err)
		}
		pings[p.Name]++
	}
	if want := map[string]int{wire.ServiceFrontend: 1, wire.ServicePlanner: 1, wire.ServiceWorker: 2}; !maps.Equal(pings, want) {
		t.Errorf("services answering $SRV.PING: %v, want %v", pings, want)
	}

	infos := gatherReplies(t, observer, micro.InfoVerb, wire.ServiceFrontend)
	if len(infos) != 1 {
		t.Fatalf("%d frontends answered INFO", len(infos))
	}
	var info micro.Info
	if err := json.Unmarshal(infos[0], &info); err != nil {
		t.Fatal(err)
	}
	if len(info.Endpoints) != 1 || info.Endpoints[0].Name != d.spec.Name ||
		info.Endpoints[0].Subject != wire.InferSubject(d.spec.Name) || info.Endpoints[0].QueueGroup != wire.QueueFrontend {
		t.Errorf("frontend endpoints %+v, want one for pipeline %s on %s, queue group %s", info.Endpoints, d.spec.Name,
			wire.InferSubject(d.spec.Name), wire.QueueFrontend)
	}
	stats := gatherReplies(t, observer, micro.StatsVerb, wire.ServiceFrontend)
	if len(stats) != 1 {
		t.Fatalf("%d frontends answered STATS", len(stats))
	}
	var st micro.Stats
	if err := json.Unmarshal(stats[0], &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Endpoints) != 1 {
		t.Fatalf("frontend stats %s", stats[0])
	}
	if e := st.Endpoints[0]; e.NumRequests != 3 || e.NumErrors != 1 || !strings.Contains(e.LastError, "no inputs") ||
		e.ProcessingTime <= 0 {
		t.Errorf("frontend endpoint stats %+v, want 3 requests, 1 error (no inputs), some processing time", e)
	}

	// The status endpoints, where INFO says they are.
	var subjects []string
	for _, name := range []string{wire.ServicePlanner, wire.ServiceWorker} {
		for _, data := range gatherReplies(t, observer, micro.InfoVerb, name) {
			var i micro.Info
			if err := json.Unmarshal(data, &i); err != nil || len(i.Endpoints) != 1 || i.Endpoints[0].Name != "status" {
				t.Fatalf("%s INFO %s: %v", name, data, err)
			}
			subjects = append(subjects, i.Endpoints[0].Subject)
		}
	}
	for _, want := range []string{wire.PlannerStatusSubject(), wire.WorkerStatusSubject("w01"), wire.WorkerStatusSubject("w02")} {
		found := false
		for _, s := range subjects {
			found = found || s == want
		}
		if !found {
			t.Errorf("no status endpoint on %s (found %v)", want, subjects)
		}
	}
	msg, err := observer.Request(wire.PlannerStatusSubject(), nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ps planner.Status
	if err := json.Unmarshal(msg.Data, &ps); err != nil || ps.Plans[d.spec.Name] == nil {
		t.Errorf("planner status %s (%v): want the plan of %s", msg.Data, err, d.spec.Name)
	}
	msg, err = observer.Request(wire.WorkerStatusSubject("w01"), nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var reg wire.Registration
	if err := json.Unmarshal(msg.Data, &reg); err != nil || reg.ID != "w01" || reg.Variant == "" {
		t.Errorf("worker status %s (%v): want w01 serving a variant", msg.Data, err)
	}
	d.checkNoViolations(t)
	observerV.mu.Lock()
	defer observerV.mu.Unlock()
	if len(observerV.seen) > 0 {
		t.Errorf("the server refused the observer: %v", observerV.seen)
	}
}

// gatherReplies asks verb of every service (or of those named service) and collects the answers for a while, as
// `nats micro` does.
func gatherReplies(t *testing.T, nc *nats.Conn, verb micro.Verb, service string) [][]byte {
	t.Helper()
	subject, err := micro.ControlSubject(verb, service, "")
	if err != nil {
		t.Fatal(err)
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		m, err := sub.NextMsg(500 * time.Millisecond)
		if err != nil {
			return out
		}
		out = append(out, m.Data)
	}
}
