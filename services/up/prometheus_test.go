package up

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
)

// TestPrometheusScrapesTheSystem runs the system with its metrics endpoint, a real Prometheus scraping it (Debian's
// prometheus: `make prometheus` installs it; the test skips without it) and a steady load, then reads through
// Prometheus's HTTP API every series the services export and every query of the Grafana dashboard
// (deploy/grafana/sleipnir.json): each must return series. SLEIPNIR_OBSERVE_LOAD sets how long the load runs
// (default 8s; `make observe-metrics` runs a minute).
func TestPrometheusScrapesTheSystem(t *testing.T) {
	bin := prometheusBinary(t)
	load := 8 * time.Second
	if s := os.Getenv("SLEIPNIR_OBSERVE_LOAD"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SLEIPNIR_OBSERVE_LOAD: %v", err)
		}
		load = d
	}
	// The planner plans for the demand (loki), so that the plan's allocation series exist.
	sys, spec := startSystemWith(t, "../../examples/traffic.yaml", Config{Workers: 6, Planner: planner.Config{System: "loki"},
		MetricsAddr: "127.0.0.1:0"})
	prom := startPrometheus(t, bin, sys.MetricsAddr)

	nc, err := sys.Connect("load")
	if err != nil {
		t.Fatal(err)
	}
	// One request for a pipeline that does not exist: counted, under a bounded label.
	if _, err := nc.RequestMsg(inferMsg("no-such-pipeline"), 2*time.Second); err != nil {
		t.Fatalf("request to an unknown pipeline: %v", err)
	}
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { sendSteady(loadCtx, nc, spec.Name, 40) })
	defer func() { stopLoad(); wg.Wait() }()

	if err := testrig.WaitFor(30*time.Second, "Prometheus has scraped replies", func() bool {
		return len(prom.query(t, `sleipnir_frontend_requests_total{status="ok"}`)) > 0
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(load)

	for _, q := range []string{
		`sleipnir_frontend_requests_total{pipeline="traffic",status="ok"}`,
		`sleipnir_frontend_requests_total{pipeline="` + metrics.UnknownPipeline + `",status="error"} == 1`,
		`sleipnir_frontend_request_duration_seconds_bucket{pipeline="traffic"}`,
		`sleipnir_frontend_served_accuracy_count`, `sleipnir_frontend_accepted_total > 0`,
		`sleipnir_frontend_refused_total >= 1`, // the unknown pipeline's, and any admission control refused
		`sleipnir_worker_batch_size_bucket`, `sleipnir_worker_batch_duration_seconds_bucket`,
		`sleipnir_worker_queue_wait_seconds_bucket`, `sleipnir_worker_items_total > 0`,
		`sleipnir_worker_dropped_items_total{reason="deadline"}`, `sleipnir_worker_rerouted_total`,
		`sleipnir_worker_subrequests_total > 0`, `sleipnir_worker_workers{state="idle"}`,
		`sleipnir_plan_mode{mode="hardware"}`, `sleipnir_plan_epoch`, `sleipnir_plan_accuracy > 0`,
		`sleipnir_plan_active_servers > 0`, `sleipnir_plan_solve_duration_seconds`, `sleipnir_plan_gap`,
		`sleipnir_plan_replicas > 0`, `sleipnir_planner_demand_estimate_qps > 0`, `sleipnir_pipeline_slo_seconds`,
		`sleipnir_queue_pending_messages`, `sleipnir_queue_unacked_messages`,
	} {
		if len(prom.query(t, q)) == 0 {
			t.Errorf("%s: no series", q)
		}
	}
	queries := dashboardQueries(t, "../../deploy/grafana/sleipnir.json")
	if len(queries) < 10 {
		t.Fatalf("the dashboard has %d queries", len(queries))
	}
	for _, q := range queries {
		if len(prom.query(t, q)) == 0 {
			t.Errorf("dashboard query returns no series: %s", q)
		}
	}
}

// prometheusBinary is $SLEIPNIR_PROMETHEUS, or prometheus on the PATH; the test skips without one.
func prometheusBinary(t *testing.T) string {
	if p := os.Getenv("SLEIPNIR_PROMETHEUS"); p != "" {
		return p
	}
	p, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("no prometheus binary: `make prometheus` installs Debian's (or set SLEIPNIR_PROMETHEUS)")
	}
	return p
}

type promServer struct{ base string }

// startPrometheus runs a Prometheus that scrapes target every second, until the test ends.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n"+
		"  - job_name: sleipnir\n    static_configs:\n      - targets: [%q]\n", target)), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &promServer{base: "http://" + addr}
	if err := testrig.WaitFor(30*time.Second, "Prometheus ready", func() bool {
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		t.Fatal(err)
	}
	return p
}

// query runs an instant query and returns its series.
func (p *promServer) query(t *testing.T, q string) []json.RawMessage {
	t.Helper()
	resp, err := http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	if out.Status != "success" {
		t.Fatalf("query %s: %s", q, out.Error)
	}
	return out.Data.Result
}

// dashboardQueries are the PromQL queries of a Grafana dashboard, with its variables as Grafana would fill them in:
// every pipeline, a rate interval of several scrapes.
func dashboardQueries(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	fill := strings.NewReplacer("$pipeline", ".*", "$__rate_interval", "10s")
	var qs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, fill.Replace(tg.Expr))
		}
	}
	return qs
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func inferMsg(pipelineName string) *nats.Msg {
	m := nats.NewMsg(wire.InferSubject(pipelineName))
	m.Header.Set(wire.HeaderContentType, wire.ContentJSON)
	m.Data = []byte(`{"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 4], "data": [0.1, 0.2, 0.3, 0.4]}]}`)
	return m
}

// sendSteady sends qps requests a second until ctx ends, each waiting for its reply on its own goroutine.
func sendSteady(ctx context.Context, nc *nats.Conn, pipelineName string, qps int) {
	tick := time.NewTicker(time.Second / time.Duration(qps))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			wg.Go(func() { _, _ = nc.RequestMsg(inferMsg(pipelineName), 5*time.Second) })
		}
	}
}
