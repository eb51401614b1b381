// Package up runs the whole system in one process: an embedded NATS server with JetStream (unless an external one is
// given), the planner, a frontend and N workers, each on its own connection as if they were separate processes.
package up

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/services/frontend"
	"github.com/sleipnir-serving/sleipnir/services/planner"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// Config is the configuration of the all-in-one process.
type Config struct {
	// NATSURL points at an external server; empty starts an embedded one.
	NATSURL string
	// Auth is how every service authenticates to the external server of NATSURL.
	Auth bus.ClientAuth
	// Permissions gives the embedded server the users and permissions of a deployment (pkg/auth): each service
	// connects as its role with a key made for this run (in memory only), and connections without credentials are
	// clients, which may only send requests.
	Permissions bool
	// DataDir holds the embedded server's JetStream files.
	DataDir string
	// Fresh removes the JetStream files an earlier run left in DataDir before the embedded server starts, so that
	// it inherits no plans, workers or queued tasks.
	Fresh bool
	// NATSHost and NATSPort are where the embedded server listens for clients (port 0: in-process only).
	NATSHost string
	NATSPort int
	// MaxPayload of the embedded server, in bytes.
	MaxPayload int32
	Pipelines  []*pipeline.Spec
	Workers    int
	// WorkerClasses, when set, replaces Workers: how many workers of each server class to start (worker i of the
	// classes in name order; docs/classes.md).
	WorkerClasses map[string]int
	// Planner, Frontend and Worker are the services' own configurations (zero values: their defaults), each bound
	// to flags in its package (RegisterFlags); up sets what is its own to set: the pipelines, the services' names,
	// metrics and logger. Worker is every worker's.
	Planner  planner.Config
	Frontend frontend.Config
	Worker   worker.Config
	// MetricsAddr is where one Prometheus endpoint (/metrics) serves every service's metrics ("" disables it).
	MetricsAddr string
	Logger      *slog.Logger
	// Started, if set, is called once every service is running, with the client URL of the NATS server.
	Started func(natsURL string)
}

// System is a running all-in-one process.
type System struct {
	Server   *server.Server // nil with an external server
	URL      string         // client URL of the NATS server ("" when the embedded one only serves in-process)
	Planner  *planner.Planner
	Frontend *frontend.Frontend
	Workers  []*worker.Worker
	// MetricsAddr is where the metrics endpoint listens ("" without Config.MetricsAddr).
	MetricsAddr string

	metrics  serviceMetrics
	registry prometheus.Registerer // nil without metrics

	workerConns []*nats.Conn
	seeds       map[string][]byte // nkey seed by user name (auth.User.Name), with Permissions

	cfg    Config
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
	conns  []*nats.Conn
	mu     sync.Mutex

	waitOnce sync.Once
	waitErr  error
}

// Run starts everything and serves until ctx is done, then stops it all.
func Run(ctx context.Context, cfg Config) error {
	sys, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.Started != nil && sys.Up(ctx) {
		url := sys.URL
		if url == "" {
			url = "in-process only"
		}
		cfg.Started(url)
	}
	return sys.Wait()
}

// Up waits until the frontend serves and the planner has made its plans on the workers (planner.Planned), and says
// whether they are (false: ctx ended first). A request sent then is served or refused by plans that fit the workers
// (several pipelines' first plans need not: pkg/core Begin).
func (s *System) Up(ctx context.Context) bool {
	for _, ready := range []<-chan struct{}{s.Frontend.Ready(), s.Planner.Planned()} {
		select {
		case <-ready:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// Start starts the server (unless external) and every service. Stop them by cancelling ctx, then Wait.
func Start(ctx context.Context, cfg Config) (_ *System, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.Pipelines) == 0 {
		return nil, errors.New("up: no pipeline to serve")
	}
	if cfg.Permissions && cfg.NATSURL != "" {
		return nil, errors.New("up: permissions are the embedded server's; an external server's configuration has its own")
	}
	if cfg.WorkerClasses != nil {
		cfg.Workers = 0
		for _, n := range cfg.WorkerClasses {
			cfg.Workers += n
		}
	}
	sys := &System{cfg: cfg, URL: cfg.NATSURL, errs: make(chan error, cfg.Workers+2)}
	ctx, sys.cancel = context.WithCancel(ctx)
	defer func() {
		if err != nil {
			sys.cancel()
			sys.wg.Wait()
			sys.close()
		}
	}()
	if cfg.NATSURL == "" {
		if err := sys.startServer(); err != nil {
			return nil, err
		}
	}

	if err := sys.startMetrics(); err != nil {
		return nil, err
	}
	nc, err := sys.connect("sleipnir-planner", auth.User{Role: auth.Planner})
	if err != nil {
		return nil, err
	}
	pcfg := cfg.Planner
	pcfg.Pipelines, pcfg.Metrics, pcfg.Logger = cfg.Pipelines, sys.registry, cfg.Logger
	pl, err := planner.New(nc, pcfg)
	if err != nil {
		return nil, err
	}
	sys.Planner = pl
	sys.run(ctx, "planner", pl.Run)

	if nc, err = sys.connect("sleipnir-frontend", auth.User{Role: auth.Frontend}); err != nil {
		return nil, err
	}
	fcfg := cfg.Frontend
	fcfg.ID, fcfg.Metrics, fcfg.Logger = "up-frontend", sys.metrics.frontend, cfg.Logger
	fe, err := frontend.New(nc, fcfg)
	if err != nil {
		return nil, err
	}
	sys.Frontend = fe
	sys.run(ctx, "frontend", fe.Run)

	classes := cfg.workerClasses()
	for i := 0; i < cfg.Workers; i++ {
		id := workerID(i)
		nc, err := sys.connect("sleipnir-worker-"+id, auth.User{Role: auth.Worker, WorkerID: id})
		if err != nil {
			return nil, err
		}
		wcfg := cfg.Worker
		wcfg.ID, wcfg.Metrics, wcfg.Logger = id, sys.metrics.worker, cfg.Logger
		if classes != nil {
			wcfg.Class = classes[i]
		}
		w, err := worker.New(nc, wcfg)
		if err != nil {
			return nil, err
		}
		sys.Workers = append(sys.Workers, w)
		sys.workerConns = append(sys.workerConns, nc)
		sys.run(ctx, "worker "+id, w.Run)
	}
	return sys, nil
}

// startServer starts the embedded NATS server with JetStream, storing into DataDir (emptied first with Fresh),
// with the deployment's users and permissions when Config.Permissions asks for them.
func (sys *System) startServer() error {
	cfg := sys.cfg
	storeDir := filepath.Join(cfg.DataDir, "jetstream")
	if cfg.Fresh {
		// Only the server's own directory: DataDir may hold other files.
		if err := os.RemoveAll(storeDir); err != nil {
			return fmt.Errorf("up: fresh start: %w", err)
		}
	}
	scfg := bus.ServerConfig{StoreDir: storeDir,
		Host: cfg.NATSHost, Port: cfg.NATSPort, MaxPayload: cfg.MaxPayload}
	if cfg.Permissions {
		if err := sys.makeUsers(&scfg); err != nil {
			return err
		}
	}
	s, err := bus.StartServer(scfg)
	if err != nil {
		return fmt.Errorf("up: embedded NATS server: %w", err)
	}
	sys.Server = s
	if cfg.NATSPort != 0 {
		sys.URL = s.ClientURL()
	}
	cfg.Logger.Info("embedded NATS server with JetStream", "url", sys.URL, "state", cfg.DataDir,
		"fresh", cfg.Fresh, "permissions", cfg.Permissions)
	return nil
}

// workerClasses is the class of each worker, in order (nil without WorkerClasses: every worker is of Worker.Class).
func (cfg Config) workerClasses() []string {
	if cfg.WorkerClasses == nil {
		return nil
	}
	names := slices.Sorted(maps.Keys(cfg.WorkerClasses))
	var out []string
	for _, c := range names {
		for range cfg.WorkerClasses[c] {
			out = append(out, c)
		}
	}
	return out
}

// workerID names worker i.
func workerID(i int) string { return fmt.Sprintf("up-w%02d", i) }

// makeUsers gives the embedded server a user per service (pkg/auth's permissions), with keys made for this run, and
// takes connections without credentials for clients.
func (s *System) makeUsers(scfg *bus.ServerConfig) error {
	users := []auth.User{{Role: auth.Planner}, {Role: auth.Frontend}, {Role: auth.Client}}
	for i := 0; i < s.cfg.Workers; i++ {
		users = append(users, auth.User{Role: auth.Worker, WorkerID: workerID(i)})
	}
	s.seeds = map[string][]byte{}
	for i := range users {
		pub, seed, err := auth.NewNkey()
		if err != nil {
			return err
		}
		users[i].Nkey = pub
		s.seeds[users[i].Name()] = seed
		if users[i].Role == auth.Client {
			scfg.NoAuthUser = pub
		}
	}
	var err error
	scfg.Nkeys, err = auth.ServerNkeys(users)
	return err
}

// Connect opens a client connection to the system's NATS server (in-process for the embedded one). With
// Permissions, it is a client's: it may only send requests.
func (s *System) Connect(name string) (*nats.Conn, error) {
	return s.connect(name, auth.User{Role: auth.Client})
}

// connect opens a connection for a service of u's role: as u, with the embedded server's permissions, and with
// u's inbox prefix either way.
func (s *System) connect(name string, u auth.User) (*nats.Conn, error) {
	a := s.cfg.Auth
	if s.Server != nil {
		a = bus.ClientAuth{NkeySeed: s.seeds[u.Name()]}
	}
	opts, err := a.Options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.CustomInboxPrefix(u.Inbox()))
	var nc *nats.Conn
	if s.Server != nil {
		nc, err = bus.ConnectInProcess(s.Server, name, opts...)
	} else {
		nc, err = bus.Connect(s.cfg.NATSURL, name, opts...)
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.conns = append(s.conns, nc)
	s.mu.Unlock()
	return nc, nil
}

func (s *System) run(ctx context.Context, name string, f func(context.Context) error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f(ctx); err != nil {
			if strings.HasPrefix(name, "worker ") && ctx.Err() == nil {
				// One dead worker is a smaller cluster, not a dead system: the planner gives its replicas to others.
				s.cfg.Logger.Error("worker stopped", "worker", name, "err", err)
				return
			}
			s.errs <- fmt.Errorf("%s: %w", name, err)
			s.cancel()
		}
	}()
}

// KillWorker makes worker i crash: its connection closes at once, so it can neither acknowledge nor hand back what it
// holds, as when its process dies. For failure tests and drills.
func (s *System) KillWorker(i int) { s.workerConns[i].Close() }

// Stop cancels every service; Wait returns once they have stopped.
func (s *System) Stop() { s.cancel() }

// Wait waits for every service to stop, then closes the connections and shuts the embedded server down. It may be
// called more than once.
func (s *System) Wait() error {
	s.waitOnce.Do(func() {
		s.wg.Wait()
		s.close()
		close(s.errs)
		var errs []error
		for err := range s.errs {
			errs = append(errs, err)
		}
		s.waitErr = errors.Join(errs...)
	})
	return s.waitErr
}

func (s *System) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, nc := range s.conns {
		nc.Close()
	}
	s.conns = nil
	if s.metrics.server != nil {
		_ = s.metrics.server.Close()
	}
	if s.Server != nil {
		s.Server.Shutdown()
		s.Server.WaitForShutdown()
	}
}
