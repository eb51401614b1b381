//go:build compose

package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The private engine's addresses: its default bridge and the pool compose networks are cut from. No NAT
// (--iptables=false): containers reach their own networks and nothing else.
const (
	engineBridge = "10.214.0.1/24"
	enginePool   = "base=10.215.0.0/16,size=24"
)

// engine is the Docker engine the test runs on: one that already answered, or a dockerd of its own.
type engine struct {
	env []string // the environment docker and docker-compose run with (DOCKER_HOST)
	own bool     // started here, with its data root under the state directory
}

// startEngine uses the engine that answers (DOCKER_HOST, the default socket, or one this test left running in dir),
// or starts dockerd with its data root, exec root, socket and pid file in dir, stopped when the test ends.
func startEngine(t *testing.T, dir string) *engine {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if answers(os.Environ()) {
		t.Logf("engine: the one that answers (DOCKER_HOST=%q)", os.Getenv("DOCKER_HOST"))
		return &engine{env: os.Environ()}
	}
	sock := filepath.Join(dir, "sock")
	e := &engine{env: append(os.Environ(), "DOCKER_HOST=unix://"+sock), own: true}
	if len(sock) > 100 {
		t.Fatalf("engine socket %s: longer than a unix socket path may be; use a shorter state directory", sock)
	}
	pidFile := filepath.Join(dir, "pid")
	if !answers(e.env) {
		// overlay2 where the kernel has it (a layer costs what it changes); vfs, which copies every layer whole,
		// where it does not.
		if err := startDaemon(e.env, dir, "overlay2"); err != nil {
			t.Logf("dockerd with overlay2: %v; with vfs", err)
			if err := startDaemon(e.env, dir, "vfs"); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("engine: dockerd of its own, data root %s, storage %s", filepath.Join(dir, "root"),
		strings.TrimSpace(e.run(t, nil, "docker", "info", "--format", "{{.Driver}}")))
	t.Cleanup(func() { stopDaemon(t, pidFile) })
	return e
}

// startDaemon starts dockerd with its roots, socket and pid file in dir on storage driver, and waits until it
// answers.
func startDaemon(env []string, dir, driver string) error {
	pidFile, sock := filepath.Join(dir, "pid"), filepath.Join(dir, "sock")
	_ = os.Remove(pidFile) // a killed daemon's
	log, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command("dockerd", "--data-root", filepath.Join(dir, "root"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", pidFile, "-H", "unix://"+sock, "--storage-driver="+driver, "--iptables=false", "--ip6tables=false",
		"--bip", engineBridge, "--default-address-pool", enginePool)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dockerd: %v (make compose-test installs docker.io)", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(60 * time.Second); !answers(env); time.Sleep(250 * time.Millisecond) {
		select {
		case err := <-exited:
			return fmt.Errorf("dockerd exited (%v); its log: %s", err, log.Name())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return fmt.Errorf("dockerd did not answer within 60 s; its log: %s", log.Name())
		}
	}
	return nil
}

// stopDaemon stops the dockerd whose pid file is pidFile (SIGTERM: it stops its containers), waiting up to 60 s.
func stopDaemon(t *testing.T, pidFile string) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Errorf("dockerd's pid file: %v", err)
		return
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 1 {
		t.Errorf("dockerd's pid file holds %q", b)
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
	}
	t.Errorf("dockerd (pid %d) still runs 60 s after SIGTERM; killed", pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// answers reports whether a Docker engine answers with env's DOCKER_HOST.
func answers(env []string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}")
	cmd.Env = env
	return cmd.Run() == nil
}

// run runs a command of the engine's (docker, docker-compose) in the repository with extra environment, its output
// returned; an error fails the test with the output.
func (e *engine) run(t *testing.T, extra []string, name string, args ...string) string {
	t.Helper()
	out, err := e.try(extra, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func (e *engine) try(extra []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = repoRoot
	cmd.Env = append(append([]string{}, e.env...), extra...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// docker runs the docker client.
func (e *engine) docker(t *testing.T, args ...string) string {
	t.Helper()
	return strings.TrimSpace(e.run(t, nil, "docker", args...))
}

// project is docker-compose.yml with the offline override, as a user without Docker Hub runs it.
type project struct {
	e   *engine
	env []string // SLEIPNIR_PIPELINE, SLEIPNIR_NPM_CACHE
}

const offlineOverride = "deploy/compose/offline.yml"

func (p *project) compose(t *testing.T, args ...string) string {
	t.Helper()
	return p.e.run(t, p.env, "docker-compose", append([]string{"-f", composeFile, "-f", offlineOverride}, args...)...)
}

// plansSince is the planner's `plan published` lines from since on (its epoch, mode, trigger and estimate), one a
// line: what a run's violations are read against (a new epoch moves workers and queues).
func (p *project) plansSince(t *testing.T, since time.Time) string {
	t.Helper()
	out := p.compose(t, "logs", "--no-color", "planner")
	var plans []string
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, `msg="plan published"`) {
			continue
		}
		var at time.Time
		for _, field := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(field, "time="); ok {
				at, _ = time.Parse(time.RFC3339Nano, v)
			}
		}
		if at.Before(since) {
			continue
		}
		var kept []string
		for _, field := range strings.Fields(line) {
			for _, k := range []string{"pipeline=", "epoch=", "mode=", "trigger=", "estimate_qps="} {
				if strings.HasPrefix(field, k) {
					kept = append(kept, field)
				}
			}
		}
		plans = append(plans, fmt.Sprintf("%.1f s: %s", at.Sub(since).Seconds(), strings.Join(kept, " ")))
	}
	if len(plans) == 0 {
		return "none"
	}
	return strings.Join(plans, "; ")
}

// container is the id of service's container.
func (p *project) container(t *testing.T, service string) string {
	t.Helper()
	id := strings.TrimSpace(p.compose(t, "ps", "-q", service))
	if id == "" || strings.Contains(id, "\n") {
		t.Fatalf("service %s: container %q", service, id)
	}
	return id
}

// waitHealthy waits until every running container of the project with a health check is healthy.
func (p *project) waitHealthy(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out := p.e.docker(t, "ps", "--filter", "label=com.docker.compose.project=sleipnir",
			"--format", `{{.Label "com.docker.compose.service"}} {{.Status}}`)
		var waiting []string
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "(health: starting)") || strings.Contains(line, "(unhealthy)") ||
				strings.Contains(line, "Restarting") {
				waiting = append(waiting, line)
			}
		}
		if len(waiting) == 0 && out != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not healthy after %s:\n%s", within, strings.Join(waiting, "\n"))
		}
		time.Sleep(2 * time.Second)
	}
}

// portsFree fails the test, naming them, when the ports the compose file publishes are taken on the host.
func portsFree(t *testing.T) {
	t.Helper()
	var taken []string
	for hostPort, service := range publishedPorts(t) {
		if service == "grafana" { // left out by the offline override
			continue
		}
		l, err := net.Listen("tcp", ":"+hostPort)
		if err != nil {
			taken = append(taken, hostPort)
			continue
		}
		l.Close()
	}
	if len(taken) > 0 {
		t.Fatalf("the compose file publishes ports %v, taken on this host: stop what listens there", taken)
	}
}

// leftovers lists the project's containers, networks and volumes the engine still has.
func (e *engine) leftovers(t *testing.T) []string {
	t.Helper()
	var left []string
	for _, kind := range []string{"container", "network", "volume"} {
		args := []string{kind, "ls", "-q", "--filter", "label=com.docker.compose.project=sleipnir"}
		if kind == "container" {
			args = append(args, "-a")
		}
		out := e.docker(t, args...)
		for _, id := range strings.Fields(out) {
			left = append(left, kind+" "+id)
		}
	}
	return left
}

// errNotUp is what waitFor's condition returns while it is not met yet.
var errNotUp = errors.New("not yet")

// waitFor polls cond every 500 ms until it returns nil, failing the test after within with its last error.
func waitFor(t *testing.T, within time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
