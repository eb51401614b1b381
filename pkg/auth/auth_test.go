package auth

import (
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestDeployConfIsRendered: deploy/nats-auth.conf is what RenderConf makes of the deployment's users, so the
// permissions in it are pkg/auth's (regenerate: go run ./cmd/sleipnir nats-auth --conf deploy/nats-auth.conf).
func TestDeployConfIsRendered(t *testing.T) {
	want, err := RenderConf(DeployUsers(DeployWorkers))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../deploy/nats-auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatal("deploy/nats-auth.conf differs from what pkg/auth renders: run " +
			"`go run ./cmd/sleipnir nats-auth --conf deploy/nats-auth.conf`")
	}
}

// TestDeployConfLoads: nats-server reads deploy/nats-server.conf (with its include) into exactly the users and
// permissions the embedded server of `up` gets from ServerNkeys.
func TestDeployConfLoads(t *testing.T) {
	users := DeployUsers(DeployWorkers)
	for i := range users {
		pub, _, err := NewNkey()
		if err != nil {
			t.Fatal(err)
		}
		users[i].Nkey = pub
		t.Setenv(users[i].NkeyVar(), pub)
	}
	opts, err := server.ProcessConfigFile("../../deploy/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ServerNkeys(users)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Nkeys) != len(want) || len(opts.Users) != 0 || opts.NoAuthUser != "" {
		t.Fatalf("config has %d nkeys, %d users, no-auth user %q; want %d nkeys only", len(opts.Nkeys),
			len(opts.Users), opts.NoAuthUser, len(want))
	}
	byKey := map[string]*server.NkeyUser{}
	for _, u := range opts.Nkeys {
		byKey[u.Nkey] = u
	}
	for i, w := range want {
		got := byKey[w.Nkey]
		if got == nil {
			t.Fatalf("user %s missing from the loaded config", users[i].Name())
		}
		if !reflect.DeepEqual(got.Permissions, w.Permissions) {
			t.Errorf("user %s: loaded permissions %+v, want %+v", users[i].Name(), got.Permissions, w.Permissions)
		}
	}
}

// TestWorkerPermissionsNameItsID: a worker may write its own heartbeat key only, and a bad id is refused.
func TestWorkerPermissionsNameItsID(t *testing.T) {
	p, err := Permissions(User{Role: Worker, WorkerID: "w07"})
	if err != nil {
		t.Fatal(err)
	}
	own := 0
	for _, s := range p.Publish.Allow {
		switch s {
		case "$KV.sleipnir.worker.w07":
			own++
		case "$KV.sleipnir.>", "$KV.sleipnir.worker.*", "$KV.sleipnir.worker.>", ">":
			t.Errorf("worker may publish to %s", s)
		}
	}
	if own != 1 {
		t.Errorf("worker w07's heartbeat key is allowed %d times, want once: %v", own, p.Publish.Allow)
	}
	for _, u := range []User{{Role: Worker, WorkerID: "w.*"}, {Role: Worker}, {Role: Client, Tenant: "a.>"},
		{Role: Worker, WorkerID: "w1", Tenant: "a"}} {
		if _, err := Permissions(u); err == nil {
			t.Errorf("user %+v accepted", u)
		}
	}
}

// TestRepliesSurviveAServerRestart: on a real nats-server with the deployment's permissions, a frontend answers a
// request delivered before the server was killed and restarted, and the client gets the reply (with response
// permissions, which the server keeps in memory, the restarted server refused it). A client may not forge a reply
// to another client's inbox.
func TestRepliesSurviveAServerRestart(t *testing.T) {
	if _, err := natsproc.Binary(); err != nil {
		t.Skip(err)
	}
	users := []User{{Role: Frontend}, {Role: Client}}
	seeds := make([][]byte, len(users))
	for i := range users {
		pub, seed, err := NewNkey()
		if err != nil {
			t.Fatal(err)
		}
		users[i].Nkey, seeds[i] = pub, seed
	}
	conf, err := RenderConf(users)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := natsproc.Start(natsproc.Config{Name: "auth-restart", StoreDir: t.TempDir(), Conf: conf})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	violations := make(chan error, 10) // the client's
	connect := func(i int) *nats.Conn {
		kp, err := nkeys.FromSeed(seeds[i])
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(srv.URL(), nats.Nkey(users[i].Nkey, kp.Sign), nats.CustomInboxPrefix(users[i].Inbox()),
			nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				if users[i].Role == Client {
					violations <- err
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	frontend, client := connect(0), connect(1)

	requests, err := frontend.SubscribeSync(wire.InferSubject("p"))
	if err != nil {
		t.Fatal(err)
	}
	frontend.Flush()
	inbox := client.NewInbox()
	replies, err := client.SubscribeSync(inbox + ".*")
	if err != nil {
		t.Fatal(err)
	}
	if err := client.PublishRequest(wire.InferSubject("p"), inbox+".1", []byte("request")); err != nil {
		t.Fatal(err)
	}
	req, err := requests.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, nc := range []*nats.Conn{frontend, client} {
		for end := time.Now().Add(10 * time.Second); !nc.IsConnected() && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
		if err := nc.Flush(); err != nil { // the subscriptions are back
			t.Fatal(err)
		}
	}
	if err := req.Respond([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	if m, err := replies.NextMsg(5 * time.Second); err != nil || string(m.Data) != "reply" {
		t.Errorf("the reply to a request delivered before the restart: %v %v", m, err)
	}

	// A client forging a reply to another client's inbox is refused.
	if err := client.Publish(inbox+".2", []byte("forged")); err != nil {
		t.Fatal(err)
	}
	client.Flush()
	select {
	case err := <-violations:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("forged reply: %v, want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("a client published to a client inbox unrefused")
	}
	if m, err := replies.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("the forged reply was delivered: %q", m.Data)
	}
}

// TestInboxesAreTheirUsersOwn: each user of a deployment (with tenants) may subscribe to its own inbox prefix and to
// no other user's, and the frontends may answer on every client's inbox and on no service's.
func TestInboxesAreTheirUsersOwn(t *testing.T) {
	users := DeployUsers(3, "a", "b")
	reply := func(u User) string { return u.Inbox() + ".nuid.1" } // a reply subject as nats.go makes them
	matches := func(subject string, allowed []string) bool {
		for _, a := range allowed {
			if server.SubjectMatchesFilter(subject, a) {
				return true
			}
		}
		return false
	}
	seen := map[string]string{}
	for _, u := range users {
		if other, ok := seen[u.Inbox()]; ok {
			t.Errorf("%s and %s share the inbox prefix %s", u.Name(), other, u.Inbox())
		}
		seen[u.Inbox()] = u.Name()
	}
	frontend, err := Permissions(User{Role: Frontend})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		p, err := Permissions(u)
		if err != nil {
			t.Fatal(err)
		}
		for _, other := range users {
			if got, want := matches(reply(other), p.Subscribe.Allow), other.Name() == u.Name(); got != want {
				t.Errorf("%s may read %s's replies: %v, want %v", u.Name(), other.Name(), got, want)
			}
		}
		client := u.Role == Client || u.Role == Observer
		if got := matches(reply(u), frontend.Publish.Allow); got != client {
			t.Errorf("frontends may publish to %s's inbox: %v, want %v", u.Name(), got, client)
		}
	}
}
