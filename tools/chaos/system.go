// Package chaos is the fault suite: it runs the services as separate processes around a standalone nats-server,
// puts them under load with loadgen, injects one fault at a time (SIGKILLs, a server restart, crafted and forged
// messages) and reports, per fault, what the clients saw: sent, ok, lost, duplicate replies, violations and the
// time to recover. `bin/sleipnir chaos` runs it; its test runs a short version.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
)

// Roles of the processes; with Auth, each role connects as its own user.
const (
	RolePlanner  = "planner"
	RoleFrontend = "frontend"
	RoleWorker   = "worker"
	RoleClient   = "client" // loadgen, crafted and forged messages
	// RoleObserver is the suite's own connection: a client that may also read the KV bucket (which workers are
	// active); without an observer user, the client's.
	RoleObserver = "observer"
)

// restartDelay is how long an orchestrator (docker, systemd) waits before restarting a process that exited.
const restartDelay = time.Second

// proc is one service process, restarted like an orchestrator would when it exits unasked.
type proc struct {
	name, role string
	bin        string
	args       []string
	wrap       []string // the command it runs under (its network namespace's), if any
	log        io.Writer
	// metricsURL is its Prometheus endpoint (Config.Metrics), kept across restarts; "" without.
	metricsURL string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	stopping bool     // the suite killed it: do not restart on its own
	crashes  []string // exits the suite did not cause
	closed   bool
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil || p.closed {
		return nil
	}
	cmd := wrapped(p.wrap, p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd, p.stopping = cmd, false
	exited := make(chan struct{})
	p.exited = exited
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		crashed := !p.stopping && !p.closed
		if crashed {
			p.crashes = append(p.crashes, fmt.Sprintf("%s exited: %v", p.name, err))
		}
		p.cmd = nil
		p.mu.Unlock()
		close(exited)
		if crashed {
			time.Sleep(restartDelay)
			_ = p.start()
		}
	}()
	return nil
}

// kill sends SIGKILL and waits for the exit; the process stays down until start.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.stopping = true
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// close stops the process for good: SIGTERM, then SIGKILL after 5 s.
func (p *proc) close() {
	p.mu.Lock()
	p.closed = true
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
}

// pid is the process's id, 0 while it is down.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *proc) takeCrashes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.crashes
	p.crashes = nil
	return c
}

// System is one deployment under test: the server (or the cluster's servers) and every service process.
type System struct {
	cfg *Config
	// Server is the server, or the cluster's first; Nodes are all of them (one without a cluster).
	Server *natsproc.Server
	Nodes  []*natsproc.Server
	procs  map[string]*proc
	// lab holds the processes' network namespaces (Config.Netns); nil on loopback.
	lab *netLab
	// judges see a fault's row once measured and return its failures: what an Inject can only judge afterwards.
	judges []func(Row) (notes, failures []string)
	// NC is the suite's own connection (role observer, else client).
	NC   *nats.Conn
	logs []*os.File
}

// Frontends and workers are named so: fe1, fe2; w01, w02, ...
func frontendName(i int) string { return fmt.Sprintf("fe%d", i+1) }
func workerName(i int) string   { return fmt.Sprintf("w%02d", i+1) } // auth.WorkerIDs for fewer than 100

// startSystem starts the server, the planner, two frontends and the workers, each logging into dir.
func startSystem(cfg *Config, dir string) (*System, error) {
	lab, nodes, err := startServers(cfg, dir)
	if err != nil {
		return nil, err
	}
	s := &System{cfg: cfg, Server: nodes[0], Nodes: nodes, procs: map[string]*proc{}, lab: lab}
	urls := s.URLs()
	observer := RoleObserver
	if _, ok := cfg.Auth.user(observer, observer); !ok {
		observer = RoleClient
	}
	opts, err := cfg.Auth.options(observer, observer)
	if err == nil {
		// A cluster serves JetStream once it has elected its leaders; a planner started before would exit.
		err = natsproc.WaitHealthy(nodes, 60*time.Second)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	err = s.startServices(dir, urls)
	if err == nil {
		s.NC, err = nats.Connect(urls, append(opts, nats.Name("sleipnir-chaos"), nats.MaxReconnects(-1),
			nats.ReconnectWait(100*time.Millisecond), nats.ReconnectBufSize(64<<20))...)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// startServers starts the NATS server, or a cluster of cfg.Nodes, storing into dir; with cfg.Netns each in a
// network namespace of the lab it returns (else nil).
func startServers(cfg *Config, dir string) (*netLab, []*natsproc.Server, error) {
	conf := ""
	if cfg.Auth != nil {
		conf = cfg.Auth.Conf
	}
	store := filepath.Join(dir, "jetstream")
	if err := os.MkdirAll(store, 0o700); err != nil {
		return nil, nil, err
	}
	var lab *netLab
	if cfg.Netns {
		var err error
		if lab, err = newNetLab(); err != nil {
			return nil, nil, err
		}
	}
	// place puts a server in its namespace, if any.
	place := func(_ int, c *natsproc.Config) error {
		if lab == nil {
			return nil
		}
		var err error
		c.Host, c.Wrap, err = lab.add(c.Name)
		return err
	}
	var nodes []*natsproc.Server
	var err error
	if cfg.Nodes > 1 {
		nodes, err = natsproc.StartCluster(clusterName, cfg.Nodes, store, natsproc.Config{Conf: ldmConf + conf, Monitor: true},
			place)
	} else {
		c := natsproc.Config{Name: "chaos", StoreDir: store, Conf: conf, Monitor: true,
			Args: []string{"-l", filepath.Join(dir, "nats-server.log")}}
		var srv *natsproc.Server
		if err = place(0, &c); err == nil {
			srv, err = natsproc.Start(c)
		}
		nodes = []*natsproc.Server{srv}
	}
	if err != nil {
		if lab != nil {
			lab.close()
		}
		return nil, nil, err
	}
	return lab, nodes, nil
}

// startServices starts the planner, two frontends and the workers as processes of s, each given every server's
// URL (urls) and logging into dir.
func (s *System) startServices(dir, urls string) error {
	cfg := s.cfg
	add := func(name, role string, args ...string) error {
		f, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return err
		}
		s.logs = append(s.logs, f)
		args = append(append(args, "--nats", urls), cfg.Auth.args(name, role)...)
		host, wrap, err := s.namespace(name)
		if err != nil {
			return err
		}
		metricsURL := ""
		if cfg.Metrics {
			port, err := natsproc.FreePort()
			if err != nil {
				return err
			}
			addr := net.JoinHostPort(host, strconv.Itoa(port))
			args, metricsURL = append(args, "--metrics-addr", addr), "http://"+addr+metrics.Path
		}
		p := &proc{name: name, role: role, bin: cfg.Sleipnir, args: args, wrap: wrap, log: f, metricsURL: metricsURL}
		s.procs[name] = p
		return p.start()
	}
	plannerArgs := []string{"planner"}
	for _, file := range append([]string{cfg.Pipeline}, cfg.MorePipelines...) {
		plannerArgs = append(plannerArgs, "--pipeline", file)
	}
	err := add("planner", RolePlanner, append(plannerArgs, cfg.PlannerArgs...)...)
	for i := 0; i < 2 && err == nil; i++ {
		err = add(frontendName(i), RoleFrontend, "frontend", "--id", frontendName(i), "--http", "")
	}
	for i := 0; i < cfg.Workers && err == nil; i++ {
		err = add(workerName(i), RoleWorker, "worker", "--id", workerName(i))
	}
	return err
}

// StartTopology starts the suite's deployment for a user, with no load and no fault: the server, or a cluster of
// cfg.Nodes, the planner, two frontends and cfg.Workers workers as processes logging into dir, each given every
// server's URL; it returns once a request is served. Close stops it.
func StartTopology(ctx context.Context, cfg Config, dir string) (*System, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	sys, err := startSystem(&cfg, dir)
	if err != nil {
		return nil, err
	}
	for _, spec := range cfg.specs {
		if err := sys.waitServing(ctx, spec.Name, 60*time.Second); err != nil {
			sys.Close()
			return nil, fmt.Errorf("%s: %w", spec.Name, err)
		}
	}
	return sys, nil
}

// Kill SIGKILLs a process (planner, fe1, w03, ...); it stays down until Start.
func (s *System) Kill(name string) error {
	p, ok := s.procs[name]
	if !ok {
		return fmt.Errorf("no process %s", name)
	}
	p.kill()
	return nil
}

// Start starts a killed process again with the same command line, as an orchestrator would.
func (s *System) Start(name string) error {
	p, ok := s.procs[name]
	if !ok {
		return fmt.Errorf("no process %s", name)
	}
	return p.start()
}

// KillAndRestart SIGKILLs a process and starts it again after delay (or when ctx ends).
func (s *System) KillAndRestart(ctx context.Context, name string, delay time.Duration) error {
	if err := s.Kill(name); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(delay):
	}
	return s.Start(name)
}

// Crashes returns, and forgets, the exits of processes the suite did not cause (each was restarted).
func (s *System) Crashes() []string {
	var out []string
	names := make([]string, 0, len(s.procs))
	for n := range s.procs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		out = append(out, s.procs[n].takeCrashes()...)
	}
	return out
}

// clusterName names the cluster of Config.Nodes servers; its nodes are sleipnir-1, sleipnir-2, ...
const clusterName = "sleipnir"

// namespace makes the network namespace of a process and returns its address and the command prefix that runs in
// it; loopback and nil without Config.Netns.
func (s *System) namespace(name string) (host string, wrap []string, err error) {
	if s.lab == nil {
		return "127.0.0.1", nil, nil
	}
	return s.lab.add(name)
}

// wrapped is the command that runs bin under wrap (nothing: bin itself).
func wrapped(wrap []string, bin string, args ...string) *exec.Cmd {
	if len(wrap) == 0 {
		return exec.Command(bin, args...)
	}
	return exec.Command(wrap[0], append(slices.Clone(wrap[1:]), append([]string{bin}, args...)...)...)
}

// Pipeline is the name of the pipeline the planner serves (the first, if several).
func (s *System) Pipeline() string { return s.cfg.spec.Name }

// Pipelines are the names of every pipeline the planner serves.
func (s *System) Pipelines() []string {
	var names []string
	for _, spec := range s.cfg.specs {
		names = append(names, spec.Name)
	}
	return names
}

// URLs are the client URLs of every server, comma-separated, as the services get them.
func (s *System) URLs() string { return natsproc.URLs(s.Nodes) }

// ClientArgs are the connection flags loadgen gets.
func (s *System) ClientArgs() []string {
	args := append([]string{"--nats", s.URLs()}, s.cfg.Auth.args(RoleClient, RoleClient)...)
	if u, _ := s.cfg.Auth.user(RoleClient, RoleClient); u.Inbox != "" {
		args = append(args, "--inbox-prefix", u.Inbox)
	}
	return args
}

// Close stops every process and the server.
func (s *System) Close() {
	if s.NC != nil {
		s.NC.Close()
	}
	var wg sync.WaitGroup
	for _, p := range s.procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.close() }()
	}
	wg.Wait()
	for _, n := range s.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.Stop() }()
	}
	wg.Wait()
	if s.lab != nil {
		s.lab.close()
	}
	for _, f := range s.logs {
		f.Close()
	}
}

var errNotReady = errors.New("the system did not serve a request")
