package up

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/frontend"
	"github.com/sleipnir-serving/sleipnir/services/planner"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// authSpec is a two-task chain on one replica each, served by workers w01 and w02.
const authSpec = `
name: auth
slo_ms: 5000
tasks:
  - name: a
    children: [b]
    variants:
      - {name: x, accuracy: 0.9, executor: {kind: emulated}, fanout: {mean: 1, distribution: fixed},
         profile: [{batch: 1, p50_ms: 2, p95_ms: 2}, {batch: 4, p50_ms: 2, p95_ms: 2}]}
  - name: b
    variants:
      - {name: y, accuracy: 0.9, executor: {kind: emulated},
         profile: [{batch: 1, p50_ms: 2, p95_ms: 2}, {batch: 4, p50_ms: 2, p95_ms: 2}]}
batch_sizes: [1, 4]
allocation:
  - {task: a, variant: x, replicas: 1, max_batch: 4}
  - {task: b, variant: y, replicas: 1, max_batch: 4}
`

// deployServer starts a real nats-server with deploy/nats-server.conf and deploy/nats-auth.conf as checked in, every
// user's public key in the environment as a deployment gives them, and returns it with each user's seed by name.
func deployServer(t *testing.T) (*natsproc.Server, map[string][]byte) {
	t.Helper()
	authConf, err := os.ReadFile("../../deploy/nats-auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	return deployServerWith(t, auth.DeployUsers(auth.DeployWorkers), authConf)
}

// deployServerWith starts a real nats-server with deploy/nats-server.conf including authConf, the authorization of
// users (their public keys from the environment).
func deployServerWith(t *testing.T, users []auth.User, authConf []byte) (*natsproc.Server, map[string][]byte) {
	t.Helper()
	if _, err := natsproc.Binary(); err != nil {
		t.Skip(err)
	}
	seeds := map[string][]byte{}
	for _, u := range users {
		pub, seed, err := auth.NewNkey()
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(u.NkeyVar(), pub) // the server process inherits the environment
		seeds[u.Name()] = seed
	}
	dir := t.TempDir()
	// Beside the configuration natsproc writes there, for its include.
	if err := os.WriteFile(filepath.Join(dir, "nats-auth.conf"), authConf, 0o600); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile("../../deploy/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	s, err := natsproc.Start(natsproc.Config{StoreDir: dir, Conf: string(conf)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s, seeds
}

// violations collects the permission violations the server reports to one connection.
type violations struct {
	mu   sync.Mutex
	seen []string
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrPermissionViolation) {
		v.mu.Lock()
		v.seen = append(v.seen, err.Error())
		v.mu.Unlock()
	}
}

// expect waits for the server's permissions violation naming subject.
func (v *violations) expect(t *testing.T, what, subject string) {
	t.Helper()
	if err := testrig.WaitFor(3*time.Second, fmt.Sprintf("%s: a permissions violation for %q", what, subject),
		func() bool {
			v.mu.Lock()
			defer v.mu.Unlock()
			for _, s := range v.seen {
				if strings.Contains(s, `"`+subject+`"`) {
					return true
				}
			}
			return false
		}); err != nil {
		v.mu.Lock()
		defer v.mu.Unlock()
		t.Errorf("%v (seen: %v)", err, v.seen)
	}
}

// connectAs connects to url as user u (its seed from seeds), with its own inbox prefix.
func connectAs(t *testing.T, url string, seeds map[string][]byte, u auth.User) (*nats.Conn, *violations) {
	t.Helper()
	opts, err := bus.ClientAuth{NkeySeed: seeds[u.Name()]}.Options()
	if err != nil {
		t.Fatal(err)
	}
	v := &violations{}
	opts = append(opts, nats.CustomInboxPrefix(u.Inbox()), nats.ErrorHandler(v.handler))
	nc, err := bus.Connect(url, "test-"+u.Name(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, v
}

// TestDeployConfigRefusesWithoutCredentials: with the deploy configuration, a connection without credentials, or with
// a key the configuration does not list, is refused.
func TestDeployConfigRefusesWithoutCredentials(t *testing.T) {
	s, _ := deployServer(t)
	if nc, err := nats.Connect(s.URL()); err == nil {
		nc.Close()
		t.Fatal("a connection without credentials was accepted")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("connection without credentials: %v, want an authorization violation", err)
	}
	_, stranger, err := auth.NewNkey()
	if err != nil {
		t.Fatal(err)
	}
	opts, _ := bus.ClientAuth{NkeySeed: stranger}.Options()
	if nc, err := nats.Connect(s.URL(), opts...); err == nil {
		nc.Close()
		t.Fatal("a connection with an unknown nkey was accepted")
	}
}

// TestDeployConfigServesAndRefusesForgeries runs a planner, a frontend and two workers on their own users of the
// deploy configuration against a real nats-server: a client's request gets an ok reply, and every forgery measured
// before permissions existed is refused by the server.
func TestDeployConfigServesAndRefusesForgeries(t *testing.T) {
	s, seeds := deployServer(t)
	d := startDeployed(t, s.URL(), seeds, jetstream.MemoryStorage)
	spec, fe, ctx := d.spec, d.fe, d.ctx

	// The legitimate client's request is served.
	client, clientV := connectAs(t, s.URL(), seeds, auth.User{Role: auth.Client})
	reply, err := client.Request(wire.InferSubject(spec.Name), inputRequest(t), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep := decodeReply(t, reply); rep.Status != wire.StatusOK {
		t.Fatalf("reply %q (%s), want ok", rep.Status, rep.Error)
	}

	// A client cannot read root task messages (where Sleipnir-Reply-To is), nor publish a result to a frontend.
	if _, err := client.SubscribeSync(wire.TaskSubjects(spec.Name)); err != nil {
		t.Fatal(err)
	}
	clientV.expect(t, "client reads task messages", wire.TaskSubjects(spec.Name))
	forged, _ := msgpack.Marshal(&wire.ResultMessage{RequestID: "fe1-2", Items: []wire.ItemResult{{ID: "0", Den: 1,
		Status: wire.ItemOK}}})
	if err := client.Publish(wire.ResultSubject("fe1"), forged); err != nil {
		t.Fatal(err)
	}
	clientV.expect(t, "client forges a result", wire.ResultSubject("fe1"))
	// Nor read the services' replies and KV deliveries, nor results.
	for _, subject := range []string{"_SLEIPNIR.>", wire.ResultPrefix + ">"} {
		if _, err := client.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
		clientV.expect(t, "client reads "+subject, subject)
	}
	// A forged demand report, from a client or a worker.
	if err := client.Publish(wire.DemandSubject(spec.Name), []byte{0x80}); err != nil {
		t.Fatal(err)
	}
	clientV.expect(t, "client reports demand", wire.DemandSubject(spec.Name))

	w1, w1V := connectAs(t, s.URL(), seeds, auth.User{Role: auth.Worker, WorkerID: "w01"})
	if err := w1.Publish(wire.DemandSubject(spec.Name), []byte{0x80}); err != nil {
		t.Fatal(err)
	}
	w1V.expect(t, "worker reports demand", wire.DemandSubject(spec.Name))

	// KV writes: only the planner writes specs, plans and assignments; a worker writes only its own heartbeat.
	fe2, feV := connectAs(t, s.URL(), seeds, auth.User{Role: auth.Frontend})
	putDenied := func(nc *nats.Conn, v *violations, who, key string, value []byte) {
		t.Helper()
		js, _ := jetstream.New(nc)
		kv, err := bus.BindBucket(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		// The server refuses at once, but the put only learns it by waiting for an acknowledgement.
		pctx, pcancel := context.WithTimeout(ctx, 250*time.Millisecond)
		defer pcancel()
		if _, err := kv.Put(pctx, key, value); err == nil {
			t.Errorf("%s wrote %s", who, key)
		}
		v.expect(t, who+" writes "+key, wire.KVSubject(key))
	}
	putDenied(w1, w1V, "worker w01", wire.PlanKey(spec.Name), []byte("{}"))
	putDenied(fe2, feV, "frontend", wire.PlanKey(spec.Name), []byte("{}"))
	putDenied(w1, w1V, "worker w01", wire.AssignKey("w02"), []byte(`{"pipeline":"auth","task":"a","variant":"x"}`))
	putDenied(w1, w1V, "worker w01", wire.WorkerKey("x"), []byte(`{"id":"x"}`))
	putDenied(w1, w1V, "worker w01", wire.WorkerKey("w02"), []byte(`{"id":"w02"}`))
	putDenied(fe2, feV, "frontend", wire.SpecKey(spec.Name), []byte("garbage"))
	putDenied(w1, w1V, "worker w01", wire.SpecKey(spec.Name), []byte("garbage"))

	// A worker's own heartbeat is its to write.
	js1, _ := jetstream.New(w1)
	kv1, err := bus.BindBucket(ctx, js1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv1.Get(ctx, wire.PlanKey(spec.Name)); err != nil {
		t.Errorf("worker cannot read the plan: %v", err)
	}
	// Neither frontends nor workers declare JetStream state: the planner owns it.
	cctx, ccancel := context.WithTimeout(ctx, 250*time.Millisecond)
	defer ccancel()
	if _, err := js1.CreateOrUpdateConsumer(cctx, wire.TaskStream(spec.Name), jetstream.ConsumerConfig{
		Durable: wire.Consumer("a", "x"), AckWait: time.Hour}); err == nil {
		t.Error("a worker updated a variant's consumer")
	}
	w1V.expect(t, "worker updates a consumer", "$JS.API.CONSUMER.CREATE."+wire.TaskStream(spec.Name)+"."+
		wire.Consumer("a", "x"))

	// None of that reached the services: the plan is the planner's, every request was answered once, and the
	// system still serves.
	e, err := kv1.Get(ctx, wire.PlanKey(spec.Name))
	if err != nil || string(e.Value()) == "{}" {
		t.Fatalf("plan after the forgeries: %v %q", err, e.Value())
	}
	reply, err = client.Request(wire.InferSubject(spec.Name), inputRequest(t), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep := decodeReply(t, reply); rep.Status != wire.StatusOK {
		t.Fatalf("reply after the forgeries %q (%s), want ok", rep.Status, rep.Error)
	}
	if st := fe.Stats(); st.BadReports != 0 || st.StrayLeaves != 0 || st.Replied != 2 {
		t.Errorf("frontend stats %+v: a forgery got through", st)
	}
	d.checkNoViolations(t)
}

// deployed is a planner, a frontend and workers w01 and w02, each on its own user of the deploy configuration.
type deployed struct {
	spec     *pipeline.Spec
	fe       *frontend.Frontend
	workers  []*worker.Worker
	services map[string]*violations // what the server refused each service
	ctx      context.Context
}

func startDeployed(t *testing.T, url string, seeds map[string][]byte, storage jetstream.StorageType) *deployed {
	t.Helper()
	spec, err := pipeline.Parse([]byte(authSpec))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	// What the server refused the services themselves: nothing, or their permissions miss a subject they need.
	services := map[string]*violations{}

	// Workers and the frontend first: they wait for the planner's bucket and consumers instead of making them.
	var workers []*worker.Worker
	for _, id := range []string{"w01", "w02"} {
		nc, v := connectAs(t, url, seeds, auth.User{Role: auth.Worker, WorkerID: id})
		services["worker "+id] = v
		w, err := worker.New(nc, worker.Config{ID: id, FetchWait: 100 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
		testrig.Run(t, "worker "+id, w.Run)
	}
	feNC, feV := connectAs(t, url, seeds, auth.User{Role: auth.Frontend})
	services["frontend"] = feV
	fe, err := frontend.New(feNC, frontend.Config{ID: "fe1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "frontend", fe.Run)
	time.Sleep(300 * time.Millisecond) // the scenario: the planner comes last, while the others wait for it
	plNC, plV := connectAs(t, url, seeds, auth.User{Role: auth.Planner})
	services["planner"] = plV
	pl, err := planner.New(plNC, planner.Config{Pipelines: []*pipeline.Spec{spec}, Storage: storage,
		System: "static", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "planner", pl.Run)
	waitServing(t, fe, workers, 2)
	return &deployed{spec: spec, fe: fe, workers: workers, services: services, ctx: t.Context()}
}

// checkNoViolations fails the test if the server refused a service anything.
func (d *deployed) checkNoViolations(t *testing.T) {
	t.Helper()
	for name, v := range d.services {
		v.mu.Lock()
		if len(v.seen) > 0 {
			t.Errorf("the server refused the %s: %v", name, v.seen)
		}
		v.mu.Unlock()
	}
}

// TestUpEmbeddedPermissions: `sleipnir up --nats-auth` runs its embedded server with the same permissions: a client
// (a connection without credentials) is served, and cannot forge a result or write the bucket.
func TestUpEmbeddedPermissions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "auth.yaml")
	if err := os.WriteFile(file, []byte(authSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	sys, spec := startSystemWith(t, file, Config{Workers: 2, Permissions: true})
	v := &violations{}
	nc, err := bus.ConnectInProcess(sys.Server, "test-client", nats.ErrorHandler(v.handler),
		nats.CustomInboxPrefix(auth.User{Role: auth.Client}.Inbox()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	reply, err := nc.Request(wire.InferSubject(spec.Name), inputRequest(t), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep := decodeReply(t, reply); rep.Status != wire.StatusOK {
		t.Fatalf("reply %q (%s), want ok", rep.Status, rep.Error)
	}
	if err := nc.Publish(wire.ResultSubject("up-frontend"), []byte{0x80}); err != nil {
		t.Fatal(err)
	}
	v.expect(t, "client forges a result", wire.ResultSubject("up-frontend"))
	if err := nc.Publish(wire.KVSubject(wire.PlanKey(spec.Name)), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	v.expect(t, "client writes a plan", wire.KVSubject(wire.PlanKey(spec.Name)))
}

// TestDeployConfigSurvivesServerRestart: after the server restarts, the services reconnect, watch the bucket again and
// bind their consumers again under their permissions, and serve.
func TestDeployConfigSurvivesServerRestart(t *testing.T) {
	s, seeds := deployServer(t)
	d := startDeployed(t, s.URL(), seeds, jetstream.FileStorage)
	client, _ := connectAs(t, s.URL(), seeds, auth.User{Role: auth.Client})
	request := func() error {
		reply, err := client.Request(wire.InferSubject(d.spec.Name), inputRequest(t), 2*time.Second)
		if err != nil {
			return err
		}
		if rep := decodeReply(t, reply); rep.Status != wire.StatusOK {
			return errors.New("status " + rep.Status + " " + rep.Error)
		}
		return nil
	}
	if err := request(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	var err error
	if werr := testrig.WaitFor(15*time.Second, "an ok reply after the restart", func() bool {
		err = request()
		return err == nil
	}); werr != nil {
		t.Fatalf("%v: %v", werr, err)
	}
	d.checkNoViolations(t)
}
