package up

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// sniffer is a client user subscribed to everything it may read, and to what it may not, counting what reaches it.
type sniffer struct {
	user auth.User
	nc   *nats.Conn
	v    *violations
	mu   sync.Mutex
	got  map[string][]string // subjects received, by subscription
}

func (s *sniffer) subscribe(t *testing.T, subject string) {
	t.Helper()
	if _, err := s.nc.Subscribe(subject, func(m *nats.Msg) {
		s.mu.Lock()
		s.got[subject] = append(s.got[subject], m.Subject)
		s.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
}

// TestClientsSeeOnlyTheirOwnReplies: with the deployment's permissions (deploy/nats-auth.conf's users plus two
// tenants, as `sleipnir nats-auth --clients a,b` renders them) on a real nats-server, client A sends requests and
// gets its replies, and clients B (the deployment's client, the observer and tenant b), each subscribed to
// everything it may and refused the rest, see none of them.
func TestClientsSeeOnlyTheirOwnReplies(t *testing.T) {
	users := auth.DeployUsers(auth.DeployWorkers, "a", "b")
	conf, err := auth.RenderConf(users)
	if err != nil {
		t.Fatal(err)
	}
	s, seeds := deployServerWith(t, users, []byte(conf))
	d := startDeployed(t, s.URL(), seeds, jetstream.MemoryStorage)
	tenantA := auth.User{Role: auth.Client, Tenant: "a"}
	a, aV := connectAs(t, s.URL(), seeds, tenantA)

	var sniffers []*sniffer
	for _, u := range []auth.User{{Role: auth.Client}, {Role: auth.Observer}, {Role: auth.Client, Tenant: "b"}} {
		nc, v := connectAs(t, s.URL(), seeds, u)
		sn := &sniffer{user: u, nc: nc, v: v, got: map[string][]string{}}
		sniffers = append(sniffers, sn)
		sn.subscribe(t, u.Inbox()+".>") // its own: allowed
		refused := []string{">", wire.ClientInboxes, wire.ClientInboxPrefix("*") + ".>", tenantA.Inbox() + ".>",
			tenantA.Inbox() + ".*.*"}
		for _, subject := range refused {
			sn.subscribe(t, subject)
		}
		for _, subject := range refused {
			v.expect(t, u.Name()+" reads "+subject, subject)
		}
	}

	const n = 20
	for i := range n {
		reply, err := a.Request(wire.InferSubject(d.spec.Name), inputRequest(t), 5*time.Second)
		if err != nil {
			t.Fatalf("client a, request %d: %v", i, err)
		}
		if rep := decodeReply(t, reply); rep.Status != wire.StatusOK {
			t.Fatalf("client a, request %d: reply %q (%s), want ok", i, rep.Status, rep.Error)
		}
	}
	// Then each B asks once: its own reply reaches its subscription to its own prefix, which was live all along.
	for _, sn := range sniffers {
		reply, err := sn.nc.Request(wire.InferSubject(d.spec.Name), inputRequest(t), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", sn.user.Name(), err)
		}
		if rep := decodeReply(t, reply); rep.Status != wire.StatusOK {
			t.Fatalf("%s: reply %q (%s), want ok", sn.user.Name(), rep.Status, rep.Error)
		}
		if err := sn.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	for _, sn := range sniffers {
		sn.mu.Lock()
		for subject, got := range sn.got {
			want := 0
			if subject == sn.user.Inbox()+".>" {
				want = 1
			}
			if len(got) != want {
				t.Errorf("%s's subscription to %s received %d messages, want %d: %v...", sn.user.Name(), subject,
					len(got), want, got[:min(3, len(got))])
			}
		}
		sn.mu.Unlock()
	}
	aV.mu.Lock()
	if len(aV.seen) > 0 {
		t.Errorf("the server refused client a: %v", aV.seen)
	}
	aV.mu.Unlock()
	d.checkNoViolations(t)
}
