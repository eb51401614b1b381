// Package natsproc runs a standalone nats-server process, the one `make nats-server` builds, for tests and tools
// that need the services around a real server rather than an embedded one: permissions, faults, restarts, clusters.
package natsproc

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvBinary names the nats-server binary; `make test` sets it to bin/nats-server.
const EnvBinary = "SLEIPNIR_NATS_SERVER"

// Binary finds the nats-server binary: $SLEIPNIR_NATS_SERVER, else bin/nats-server in the module's root (found
// from the working directory upwards). The error says how to build it.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w (run `make nats-server`)", EnvBinary, p, err)
		}
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "bin", "nats-server")
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("no nats-server at %s: run `make nats-server`, or set %s", p, EnvBinary)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory; set %s", EnvBinary)
		}
		dir = parent
	}
}

// Config is one server's configuration. Conf, if not empty, is the text of a configuration file (the server is
// started with -c); Port and StoreDir are given on the command line and override it.
type Config struct {
	Name     string
	Host     string // default 127.0.0.1
	Port     int    // 0 picks a free port, kept across restarts
	StoreDir string // JetStream store; default a new temporary directory
	Conf     string
	// Args are more command-line arguments.
	Args []string
	// Monitor serves the HTTP monitoring endpoints (/varz, /connz, ...) on a free port, kept across restarts.
	Monitor bool
	// Cluster, if set, makes the server a member of a cluster (StartCluster fills it in).
	Cluster *ClusterConfig
	// Wrap, if set, is the command the server runs under, e.g. `ip netns exec NS` (it must exec the server, so that
	// signals reach it).
	Wrap []string
	// Log, if not nil, receives the server's output.
	Log *bytes.Buffer
}

// ClusterConfig is a server's place in a cluster: the cluster's name, the port its routes listen on, and the route
// URLs of the other members.
type ClusterConfig struct {
	Name   string
	Port   int
	Routes []string
}

// Server is a running (or stopped) nats-server process.
type Server struct {
	cfg         Config
	bin         string
	conf        string
	monitorPort int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has exited
}

// Start starts a server and waits until it accepts client connections.
func Start(cfg Config) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Port == 0 {
		if cfg.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if cfg.StoreDir == "" {
		if cfg.StoreDir, err = os.MkdirTemp("", "natsproc-*"); err != nil {
			return nil, err
		}
	}
	s := &Server{cfg: cfg, bin: bin}
	if cfg.Monitor {
		if s.monitorPort, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if cfg.Conf != "" {
		s.conf = filepath.Join(cfg.StoreDir, "nats-server.conf")
		if err := os.WriteFile(s.conf, []byte(cfg.Conf), 0o600); err != nil {
			return nil, err
		}
	}
	return s, s.Restart()
}

// URL is the server's client URL.
func (s *Server) URL() string {
	return "nats://" + net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port))
}

// Name is the server's name (Config.Name), as JetStream names a stream's leader and replicas.
func (s *Server) Name() string { return s.cfg.Name }

// MonitorURL is the base URL of the monitoring endpoints ("" without Config.Monitor).
func (s *Server) MonitorURL() string {
	if s.monitorPort == 0 {
		return ""
	}
	return "http://" + net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.monitorPort))
}

// Port is the server's client port.
func (s *Server) Port() int { return s.cfg.Port }

// StoreDir is the server's JetStream directory.
func (s *Server) StoreDir() string { return s.cfg.StoreDir }

// Restart starts the process again (after Kill or Stop) on the same port and store, and waits until it accepts
// connections.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("nats-server is already running")
	}
	args := []string{"-a", s.cfg.Host, "-p", strconv.Itoa(s.cfg.Port), "-js", "-sd", s.cfg.StoreDir}
	if s.cfg.Name != "" {
		args = append(args, "-n", s.cfg.Name)
	}
	if s.conf != "" {
		args = append(args, "-c", s.conf)
	}
	if s.monitorPort != 0 {
		args = append(args, "-m", strconv.Itoa(s.monitorPort))
	}
	if c := s.cfg.Cluster; c != nil {
		args = append(args, "--cluster_name", c.Name,
			"--cluster", "nats://"+net.JoinHostPort(s.cfg.Host, strconv.Itoa(c.Port)))
		if len(c.Routes) > 0 {
			args = append(args, "--routes", strings.Join(c.Routes, ","))
		}
	}
	args = append(args, s.cfg.Args...)
	cmd := exec.Command(s.bin, args...)
	if w := s.cfg.Wrap; len(w) > 0 {
		cmd = exec.Command(w[0], append(slices.Clone(w[1:]), append([]string{s.bin}, args...)...)...)
	}
	if s.cfg.Log != nil {
		cmd.Stdout, cmd.Stderr = s.cfg.Log, s.cfg.Log
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server: %w", err)
	}
	s.cmd = cmd
	done := make(chan struct{})
	s.done = done
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(done) }() // reaps it
	addr := net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port))
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); {
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("nats-server exited at start: %v", exitErr)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	s.cmd = nil
	return errors.New("nats-server did not accept connections within 15s")
}

// Pid is the process's id, 0 while it is down.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill ends the process with SIGKILL, as a crash would.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Stop ends the process with SIGTERM and waits for it: the server steps down from what it leads in JetStream and
// closes its clients at once.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

// LameDuck stops the process gracefully, as `nats-server --signal ldm` does (SIGUSR2): the server stops accepting
// clients, hands what it leads in JetStream over to the other nodes, then closes its clients one by one over its
// lame-duck duration (lame_duck_grace_period and lame_duck_duration in Config.Conf; 10 s and 2 min by default) and
// exits. LameDuck waits for the exit up to limit, then kills the process and says so.
func (s *Server) LameDuck(limit time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGUSR2)
	var err error
	select {
	case <-s.done:
	case <-time.After(limit):
		err = fmt.Errorf("%s: still in lame-duck mode after %v; killed", s.cfg.Name, limit)
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
	return err
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	// The reaper goroutine started by Restart collects the exit status.
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
	s.cmd = nil
}

// StartCluster starts n servers clustered as name, each routed to all the others, each with its own store: base's
// settings, and the names name-1, name-2, ... (base.Port, StoreDir, Cluster and Log are ignored: each server has
// its store dir/<name> and its log dir/<name>.log). place, if not nil, sets a server's own settings (its Host and
// Wrap, say) before any starts. It returns once every server accepts clients; JetStream elects its leaders a few
// seconds later (WaitHealthy, with base.Monitor).
func StartCluster(name string, n int, dir string, base Config, place func(i int, cfg *Config) error) ([]*Server, error) {
	cfgs := make([]Config, n)
	ports := make([]int, n)
	for i := range cfgs {
		cfg := base
		cfg.Name = fmt.Sprintf("%s-%d", name, i+1)
		cfg.Port = 0
		cfg.StoreDir = filepath.Join(dir, cfg.Name)
		cfg.Log = nil
		cfg.Args = append(slices.Clip(base.Args), "-l", filepath.Join(dir, cfg.Name+".log"))
		if place != nil {
			if err := place(i, &cfg); err != nil {
				return nil, err
			}
		}
		if cfg.Host == "" {
			cfg.Host = "127.0.0.1"
		}
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		cfgs[i], ports[i] = cfg, p
	}
	var servers []*Server
	for i, cfg := range cfgs {
		var routes []string
		for j, p := range ports {
			if j != i {
				routes = append(routes, "nats://"+net.JoinHostPort(cfgs[j].Host, strconv.Itoa(p)))
			}
		}
		cfg.Cluster = &ClusterConfig{Name: name, Port: ports[i], Routes: routes}
		if err := os.MkdirAll(cfg.StoreDir, 0o700); err != nil {
			return nil, err
		}
		s, err := Start(cfg)
		if err != nil {
			for _, started := range servers {
				started.Stop()
			}
			return nil, fmt.Errorf("%s: %w", cfg.Name, err)
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// WaitHealthy waits until every server's /healthz answers ok (Config.Monitor is required): for JetStream, once the
// cluster has elected its meta leader and the server is current with it. It needs no NATS user, so it works
// whatever the servers' permissions.
func WaitHealthy(servers []*Server, limit time.Duration) error {
	cl := http.Client{Timeout: time.Second}
	end := time.Now().Add(limit)
	for _, s := range servers {
		if s.MonitorURL() == "" {
			return fmt.Errorf("%s: no monitoring port (Config.Monitor)", s.cfg.Name)
		}
		for {
			resp, err := cl.Get(s.MonitorURL() + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				err = errors.New(resp.Status)
			}
			if time.Now().After(end) {
				return fmt.Errorf("%s not healthy within %v: %w", s.cfg.Name, limit, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// URLs are the client URLs of servers, comma-separated, as the services' --nats takes them.
func URLs(servers []*Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}

// FreePort asks the kernel for a free TCP port on the loopback address.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
