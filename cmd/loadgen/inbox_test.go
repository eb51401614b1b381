package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestInboxPrefixOfItsUser: under the deployment's permissions (the embedded server of `up --nats-auth`: a
// connection without credentials is the client user), loadgen on its user's inbox prefix is served, and on another
// user's it stops at once with the server's refusal and the flag to give, instead of counting every reply lost.
func TestInboxPrefixOfItsUser(t *testing.T) {
	users := []auth.User{{Role: auth.Client}, {Role: auth.Frontend}}
	seeds := make([][]byte, len(users))
	for i := range users {
		pub, seed, err := auth.NewNkey()
		if err != nil {
			t.Fatal(err)
		}
		users[i].Nkey, seeds[i] = pub, seed
	}
	nkeys, err := auth.ServerNkeys(users)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := bus.StartServer(bus.ServerConfig{StoreDir: t.TempDir(), Nkeys: nkeys, NoAuthUser: users[0].Nkey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	connect := func(prefix string, opts ...nats.Option) *nats.Conn {
		nc, err := bus.ConnectInProcess(srv, "loadgen-test", append(opts, nats.CustomInboxPrefix(prefix))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	feAuth, err := bus.ClientAuth{NkeySeed: seeds[1]}.Options()
	if err != nil {
		t.Fatal(err)
	}
	respond(t, connect(users[1].Inbox(), feAuth...), func(int64) string { return wire.StatusOK }, 0)
	cfg := Config{Pipeline: "p", QPS: 100, Duration: 300 * time.Millisecond, Grace: time.Second}

	s, err := Run(context.Background(), connect(users[0].Inbox()), cfg, nil)
	if err != nil || s.Sent == 0 || s.OK != s.Sent {
		t.Errorf("on its own prefix %s: %v, summary %+v", users[0].Inbox(), err, s)
	}
	observer := auth.User{Role: auth.Observer}.Inbox()
	start := time.Now()
	s, err = Run(context.Background(), connect(observer), cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "--inbox-prefix") || s.Sent != 0 {
		t.Errorf("on another user's prefix %s: %v, summary %+v; want a refusal before sending", observer, err, s)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %v", d)
	}
}
