package auth

import (
	"os"
	"reflect"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestDeployConfIsRendered: deploy/nats-auth.conf is what RenderConf makes of the deployment's users, so the
// permissions in it are pkg/auth's (regenerate: go run ./services/sleipnir nats-auth --conf deploy/nats-auth.conf).
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
			"`go run ./services/sleipnir nats-auth --conf deploy/nats-auth.conf`")
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
	p, err := Permissions(Worker, "w07")
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
	if _, err := Permissions(Worker, "w.*"); err == nil {
		t.Error("worker id with subject wildcards accepted")
	}
}
