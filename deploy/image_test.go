package deploy_test

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/pkg/onnx"
)

// dockerfile is what the tests use of deploy/Dockerfile: the build stage's ARGs, ENVs and go build commands, and the
// final stage's entrypoint and copies.
type dockerfile struct {
	buildArgs, buildEnv []string // "NAME=default"; the ENV instructions' text
	buildRuns           []string // RUN instructions that call go build
	entrypoint          []string
	copies              map[string]string // final stage: destination -> source in the build context
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	text := strings.ReplaceAll(readFile(t, "deploy/Dockerfile"), "\\\n", " ")
	var d dockerfile
	d.copies = map[string]string{}
	stage := -1
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		inst, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(inst) {
		case "FROM":
			stage++
		case "ARG":
			if stage == 0 {
				d.buildArgs = append(d.buildArgs, rest)
			}
		case "ENV":
			if stage == 0 {
				d.buildEnv = append(d.buildEnv, rest)
			}
		case "RUN":
			if stage == 0 && strings.Contains(rest, "go build") {
				d.buildRuns = append(d.buildRuns, rest)
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &d.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: %v", rest, err)
			}
		case "COPY":
			f := strings.Fields(rest)
			if stage > 0 && len(f) == 2 {
				d.copies[f[1]] = f[0]
			}
		}
	}
	if len(d.buildRuns) == 0 || len(d.entrypoint) == 0 {
		t.Fatalf("deploy/Dockerfile: no go build in its first stage, or no ENTRYPOINT")
	}
	return d
}

// buildScript is the build stage's go build, as sh runs it in the image (Docker runs RUN with /bin/sh -c), with
// its output directory /out moved to out and the build arguments at their defaults.
func (d dockerfile) buildScript(out string) string {
	var b strings.Builder
	for _, a := range d.buildArgs {
		name, def, _ := strings.Cut(a, "=")
		fmt.Fprintf(&b, "%s=${%s:-%s}\n", name, name, def)
	}
	for _, e := range d.buildEnv {
		fmt.Fprintf(&b, "export %s\n", e)
	}
	for _, r := range d.buildRuns {
		b.WriteString(strings.ReplaceAll(r, " /out/", " "+out+"/") + "\n")
	}
	return b.String()
}

// TestImageRunsAsComposeStartsIt builds the binaries as deploy/Dockerfile does, checks what they link (nothing the
// final stage would have to install), and runs them as the containers would, each service with its compose
// entrypoint, command, environment and mounts (container paths moved to the directories behind them, service host
// names and ports to loopback ones): the cluster profile, and the laptop profile serving OCR with ONNX Runtime.
func TestImageRunsAsComposeStartsIt(t *testing.T) {
	if out, err := exec.Command("pkg-config", "--exists", "clp").CombinedOutput(); err != nil {
		t.Skipf("no Clp (run `make deps`): %v %s", err, out)
	}
	if lib, _ := exec.Command("gcc", "-print-file-name=libgfortran.a").Output(); !filepath.IsAbs(strings.TrimSpace(string(lib))) {
		t.Skip("no static libgfortran for the static link (run `make deps`: libgfortran-12-dev)")
	}
	natsServer, err := natsproc.Binary()
	if err != nil {
		t.Skip(err)
	}
	d := parseDockerfile(t)
	bin := t.TempDir()
	build := exec.Command("sh", "-ec", d.buildScript(bin))
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build:\n%s\n%v\n%s", d.buildScript(bin), err, out)
	}
	checkLinkage(t, filepath.Join(bin, "sleipnir"), false)
	checkLinkage(t, filepath.Join(bin, "loadgen"), true)
	// The image's PATH: its binaries, the health check script, and (for the nats image) nats-server.
	if src := d.copies["/usr/local/bin/sleipnir-healthcheck"]; src != "" {
		if err := os.Symlink(mustAbs(t, filepath.Join(repoRoot, src)), filepath.Join(bin, "sleipnir-healthcheck")); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Fatal("deploy/Dockerfile does not install sleipnir-healthcheck")
	}
	if err := os.Symlink(natsServer, filepath.Join(bin, "nats-server")); err != nil {
		t.Fatal(err)
	}
	t.Run("cluster", func(t *testing.T) { runCluster(t, bin, d) })
	t.Run("laptop serving ocr", func(t *testing.T) { runLaptopOCR(t, bin, d) })
}

// runCluster: the keys job, the three NATS nodes, the planner, a frontend and four workers, until each compose
// health check passes and a request is served.
func runCluster(t *testing.T, bin string, d dockerfile) {
	p := loadProject(t, nil)
	h := &host{t: t, bin: bin, volumes: t.TempDir(), ports: map[string]int{}, entrypoint: d.entrypoint}
	if m := os.Getenv("SLEIPNIR_MODELS"); m != "" {
		h.volume = map[string]string{"models": m}
	}

	// The keys job, twice: the second start keeps the first's keys.
	envFile := filepath.Join(h.volumeDir("secrets"), "nats-server.env")
	h.runToEnd("keys", p.Services["keys"])
	first, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatalf("the keys job: %v", err)
	}
	h.runToEnd("keys", p.Services["keys"])
	if again, err := os.ReadFile(envFile); err != nil || !bytes.Equal(again, first) {
		t.Errorf("a second start of the keys job made new keys (%v)", err)
	}

	// The nodes share one host here: each gets its own loopback ports, and its routes name them.
	var routes []string
	for _, node := range natsNodes {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", h.port(node+":6222")))
	}
	for _, node := range natsNodes {
		h.start(node, p.Services[node], "-p", strconv.Itoa(h.port(node+":4222")), "-m", strconv.Itoa(h.port(node+":8222")),
			"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", h.port(node+":6222")), "--routes", strings.Join(routes, ","))
	}
	for _, node := range natsNodes {
		h.waitHealthy(node, p.Services[node])
	}

	planner := p.Services["planner"]
	if help, _ := exec.Command(filepath.Join(bin, "sleipnir"), "planner", "--help").CombinedOutput(); !bytes.Contains(help, []byte("-replicas")) {
		// services/planner's --replicas comes with the replication work (issue 28 item 1).
		t.Log("this build's planner has no --replicas: started without it")
		planner.Command = dropFlag(planner.Command, "--replicas")
	}
	h.start("planner", planner)
	started := []string{"planner", "frontend-1"}
	for _, w := range workerNames()[:4] {
		h.start(w, p.Services[w])
		started = append(started, w)
	}
	h.start("frontend-1", p.Services["frontend-1"])
	for _, name := range started {
		h.waitHealthy(name, p.Services[name])
	}

	// The first plan may leave a task without a worker until the planner moves one there (a few seconds).
	postUntilOK(t, fmt.Sprintf("http://127.0.0.1:%d/v2/models/traffic/infer", h.port("frontend-1:8080")),
		"application/json", []byte(`{"id": "r1", "inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 4], "data": [0.1, 0.2, 0.3, 0.4]}]}`), nil)

	// `docker compose run --rm loadgen ...`: as the client user, on its own inbox prefix, every reply arrives.
	loadgen := p.DisabledServices["loadgen"]
	loadgen.Command = []string{"--pipeline", "traffic", "--qps", "20", "--duration", "2s", "--json"}
	out, err := h.command("loadgen", loadgen).Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var sum struct{ Sent, OK, Lost int }
	if err != nil || json.Unmarshal([]byte(lines[len(lines)-1]), &sum) != nil || sum.Sent == 0 || sum.Lost != 0 {
		t.Errorf("compose's loadgen: %v, summary %+v:\n%s", err, sum, out)
	}
}

// runLaptopOCR: the laptop profile with SLEIPNIR_PIPELINE=ocr, where `sleipnir up` loads ONNX Runtime from the models
// volume (here $SLEIPNIR_MODELS, which holds what the models job fetches) and reads an image.
func runLaptopOCR(t *testing.T, bin string, d dockerfile) {
	models := os.Getenv("SLEIPNIR_MODELS")
	if _, err := os.Stat(onnx.LibraryPath(models)); models == "" || err != nil {
		t.Skip("no ONNX Runtime under $SLEIPNIR_MODELS (make models)")
	}
	p := loadProject(t, map[string]string{"COMPOSE_PROFILES": "laptop", "SLEIPNIR_PIPELINE": "ocr", "SLEIPNIR_LAPTOP_WORKERS": "2"})
	h := &host{t: t, bin: bin, volumes: t.TempDir(), ports: map[string]int{}, entrypoint: d.entrypoint,
		volume: map[string]string{"models": models}}
	// The models job finds what `make models` fetched and leaves it (it would fetch what is missing).
	if _, err := os.Stat(filepath.Join(models, "paddleocr", ".fetched")); err == nil {
		h.runToEnd("models", p.Services["models"])
	}
	s := p.Services["laptop"]
	// One host: the embedded server on a loopback port of its own (the later flags win).
	h.start("laptop", s, "--nats-host", "127.0.0.1", "--nats-port", strconv.Itoa(h.port("laptop:4222")))
	h.waitHealthy("laptop", s)

	// A white page with a dark bar, as PNG, in the binary tensor extension.
	page := image.NewGray(image.Rect(0, 0, 320, 160))
	for i := range page.Pix {
		page.Pix[i] = 255
	}
	draw.Draw(page, image.Rect(40, 60, 280, 90), image.Black, image.Point{}, draw.Src)
	var page_png bytes.Buffer
	if err := png.Encode(&page_png, page); err != nil {
		t.Fatal(err)
	}
	header := fmt.Sprintf(`{"inputs":[{"name":"image","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":%d}}]}`, page_png.Len())
	postUntilOK(t, fmt.Sprintf("http://127.0.0.1:%d/v2/models/ocr/infer", h.port("laptop:8080")), "application/octet-stream",
		append([]byte(header), page_png.Bytes()...), map[string]string{"Inference-Header-Content-Length": strconv.Itoa(len(header))})
}

// postUntilOK posts body to url until the answer is 200 (30 s at most).
func postUntilOK(t *testing.T, url, contentType string, body []byte, headers map[string]string) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", contentType)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer := new(bytes.Buffer)
		_, _ = answer.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		last = fmt.Sprintf("HTTP %d %s", resp.StatusCode, answer)
	}
	t.Errorf("%s: no request served in 30 s; the last answer: %s", url, last)
}

// glibc is what the final stage's Debian brings that sleipnir may need: the C library, its maths, its loader.
var glibc = map[string]bool{"libc.so.6": true, "libm.so.6": true, "ld-linux-x86-64.so.2": true}

// checkLinkage fails if the ELF file at path needs a shared library beyond glibc's, or any (or a loader) when
// static.
func checkLinkage(t *testing.T, path string, static bool) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP && static {
			t.Errorf("%s: dynamically linked (has an interpreter), want static", filepath.Base(path))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		if static || !glibc[l] {
			t.Errorf("%s: needs %s, which the image does not install", filepath.Base(path), l)
		}
	}
}

func dropFlag(args []string, flag string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == flag {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// host runs compose services as processes on this machine: a container path is the directory behind its mount, a
// service's host:port the loopback port given to it, a listen address ":port" that loopback port.
type host struct {
	t          *testing.T
	bin        string
	volumes    string            // named volumes are directories here
	volume     map[string]string // named volumes given a directory of their own
	ports      map[string]int    // "service:port" -> loopback port
	entrypoint []string          // the image's, for services that do not set one
	exited     map[string]chan struct{}
}

func (h *host) volumeDir(name string) string {
	if d, ok := h.volume[name]; ok {
		return d
	}
	d := filepath.Join(h.volumes, name)
	if err := os.MkdirAll(d, 0o700); err != nil {
		h.t.Fatal(err)
	}
	return d
}

func (h *host) port(key string) int {
	if p, ok := h.ports[key]; ok {
		return p
	}
	p, err := natsproc.FreePort()
	if err != nil {
		h.t.Fatal(err)
	}
	h.ports[key] = p
	return p
}

var hostPort = regexp.MustCompile(`([a-z][a-z0-9-]*):(\d+)`)

// rewrite moves a word of a service's command or environment from the container's world to this host's.
func (h *host) rewrite(name string, s types.ServiceConfig, word string) string {
	for _, v := range s.Volumes {
		dir := v.Source
		if v.Type == types.VolumeTypeVolume {
			dir = h.volumeDir(v.Source)
		}
		if word == v.Target || strings.HasPrefix(word, v.Target+"/") {
			return dir + strings.TrimPrefix(word, v.Target)
		}
		word = strings.ReplaceAll(word, " "+v.Target+"/", " "+dir+"/")
		word = strings.ReplaceAll(word, " "+v.Target+" ", " "+dir+" ")
	}
	if strings.HasPrefix(word, ":") { // a listen address
		if _, err := strconv.Atoi(word[1:]); err == nil {
			return fmt.Sprintf("127.0.0.1:%d", h.port(name+word))
		}
	}
	return hostPort.ReplaceAllStringFunc(word, func(m string) string {
		sub := hostPort.FindStringSubmatch(m)
		if sub[1] == "jaeger" { // no Jaeger here: a port nothing listens on
			return "127.0.0.1:1"
		}
		return fmt.Sprintf("127.0.0.1:%d", h.port(m))
	})
}

func (h *host) command(name string, s types.ServiceConfig, extra ...string) *exec.Cmd {
	args := append(append([]string{}, s.Entrypoint...), s.Command...)
	if len(s.Entrypoint) == 0 {
		args = append(append([]string{}, h.entrypoint...), s.Command...)
	}
	args = append(args, extra...)
	for i := range args {
		args[i] = h.rewrite(name, s, args[i])
	}
	path, err := exec.LookPath(filepath.Join(h.bin, args[0]))
	if err != nil {
		path = args[0] // sh
	}
	cmd := exec.Command(path, args[1:]...)
	cmd.Env = []string{"PATH=" + h.bin + ":/usr/bin:/bin", "HOME=" + h.volumes}
	for k, v := range s.Environment {
		if v != nil {
			cmd.Env = append(cmd.Env, k+"="+h.rewrite(name, s, *v))
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// runToEnd runs a one-shot service; it must succeed.
func (h *host) runToEnd(name string, s types.ServiceConfig) {
	h.t.Helper()
	if out, err := h.command(name, s).CombinedOutput(); err != nil {
		h.t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

// start starts a long-running service, stopped (and its output shown if the test failed) when the test ends.
func (h *host) start(name string, s types.ServiceConfig, extra ...string) {
	h.t.Helper()
	cmd := h.command(name, s, extra...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("%s: %v", name, err)
	}
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() { err := cmd.Wait(); close(exited); done <- err }()
	if h.exited == nil {
		h.exited = map[string]chan struct{}{}
	}
	h.exited[name] = exited
	h.t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if h.t.Failed() {
			h.t.Logf("%s (%s):\n%s", name, strings.Join(cmd.Args, " "), out.String())
		}
	})
}

// waitHealthy runs the service's compose health check until it passes (60 s at most). The nats image's wget is
// an HTTP GET of the same URL here.
func (h *host) waitHealthy(name string, s types.ServiceConfig) {
	h.t.Helper()
	test := s.HealthCheck.Test
	if len(test) < 2 || test[0] != "CMD" {
		h.t.Fatalf("%s: health check %v: want CMD and a command", name, test)
	}
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-h.exited[name]:
			h.t.Fatalf("%s exited before its health check passed", name)
		default:
		}
		var err error
		switch test[1] {
		case "wget": // the URL's port is the container's own
			u, perr := url.Parse(test[len(test)-1])
			if perr != nil {
				h.t.Fatalf("%s: health check %v: %v", name, test, perr)
			}
			u.Host = fmt.Sprintf("127.0.0.1:%d", h.port(name+":"+u.Port()))
			err = httpOK(u.String())
		case "sleipnir-healthcheck": // PORT PATH, the container's own port
			check := []string{test[1], strconv.Itoa(h.port(name + ":" + test[2])), test[3]}
			var out []byte
			out, err = h.command(name, types.ServiceConfig{ContainerSpec: types.ContainerSpec{Entrypoint: check}}).CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%w: %s", err, out)
			}
		default:
			h.t.Fatalf("%s: health check %v: a command the test does not know", name, test)
		}
		if err == nil {
			return
		}
		last = err.Error()
		time.Sleep(250 * time.Millisecond)
	}
	h.t.Fatalf("%s: health check %v never passed: %s", name, test, last)
}

func httpOK(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
