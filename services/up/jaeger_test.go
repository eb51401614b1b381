//go:build jaeger

package up

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// jaegerConfig is a Jaeger all-in-one (v2) that takes OTLP over HTTP and keeps traces in memory, every port given:
// no fixed port that another process on the machine may hold.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// startProcess runs a program until the test ends (SIGTERM, so that it flushes its spans), its output in dir.
func startProcess(t *testing.T, dir, name string, env []string, bin string, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Env = log, log, append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("%s's output:\n%s", name, tail(string(out), 2000))
		}
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// jaegerTrace is the part of Jaeger's query API answer (GET /api/traces/{id}) the test reads.
type jaegerTrace struct {
	Data []struct {
		Spans []struct {
			SpanID        string `json:"spanID"`
			OperationName string `json:"operationName"`
			References    []struct {
				RefType string `json:"refType"`
				SpanID  string `json:"spanID"`
			} `json:"references"`
			Tags []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"tags"`
			ProcessID string `json:"processID"`
		} `json:"spans"`
		Processes map[string]struct {
			ServiceName string `json:"serviceName"`
		} `json:"processes"`
	} `json:"data"`
}

// fetchTrace reads one trace from Jaeger's query API, as hopSpans and each span's service.
func fetchTrace(queryURL, traceID string) ([]hopSpan, map[string]string, error) {
	resp, err := http.Get(queryURL + "/api/traces/" + traceID)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	var tr jaegerTrace
	if err := json.Unmarshal(body, &tr); err != nil {
		return nil, nil, err
	}
	var spans []hopSpan
	services := map[string]string{}
	for _, d := range tr.Data {
		for _, s := range d.Spans {
			hs := hopSpan{ID: s.SpanID, Name: s.OperationName, Attrs: map[string]string{}}
			for _, r := range s.References {
				if r.RefType == "CHILD_OF" {
					hs.Parent = r.SpanID
				}
			}
			for _, tag := range s.Tags {
				hs.Attrs[tag.Key] = fmt.Sprint(tag.Value)
			}
			hs.Kind = hs.Attrs["span.kind"]
			spans = append(spans, hs)
			services[s.SpanID] = d.Processes[s.ProcessID].ServiceName
		}
	}
	return spans, services, nil
}

// traceTree prints a trace as an indented tree from root's children: each span's name, kind, service and the
// attributes a reader looks at first.
func traceTree(spans []hopSpan, services map[string]string, root string) string {
	var b strings.Builder
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		for _, s := range spans {
			if s.Parent != parent {
				continue
			}
			fmt.Fprintf(&b, "%s%s [%s, %s]", strings.Repeat("  ", depth), s.Name, s.Kind, services[s.ID])
			for _, k := range []string{"sleipnir.batch.size", "sleipnir.deadline.slack_ms", "sleipnir.status"} {
				if v, ok := s.Attrs[k]; ok {
					fmt.Fprintf(&b, " %s=%s", k, v)
				}
			}
			b.WriteString("\n")
			walk(s.ID, depth+1)
		}
	}
	walk(root, 0)
	return b.String()
}

// TestJaegerShowsEveryHop runs a real Jaeger and the system as separate processes around a real nats-server (the
// planner, a frontend, workers, each exporting its spans over OTLP), sends a request with a client's trace
// context, and reads its trace back through Jaeger's query API: the frontend's span and every hop's span, each
// parented as checkHops says, the frontend's from the frontend's process and the hops' from the workers'. An HTTP
// request's response carries its trace id, which Jaeger knows too.
func TestJaegerShowsEveryHop(t *testing.T) {
	jaeger := os.Getenv("SLEIPNIR_JAEGER")
	if jaeger == "" {
		t.Fatal("SLEIPNIR_JAEGER is not set: make observe-traces builds Jaeger into bin/jaeger and runs this test")
	}
	if _, err := natsproc.Binary(); err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("../..")
	dir := t.TempDir()
	sleipnir := os.Getenv("SLEIPNIR_BIN")
	if sleipnir == "" {
		sleipnir = filepath.Join(dir, "sleipnir")
		cmd := exec.Command("go", "build", "-o", sleipnir, "./cmd/sleipnir")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	var ports [4]int
	for i := range ports {
		p, err := natsproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	queryPort, grpcPort, otlpPort, httpPort := ports[0], ports[1], ports[2], ports[3]
	conf := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, jaegerConfig, queryPort, grpcPort, otlpPort), 0o600); err != nil {
		t.Fatal(err)
	}
	startProcess(t, dir, "jaeger", nil, jaeger, "--config", "file:"+conf)
	queryURL := fmt.Sprintf("http://127.0.0.1:%d", queryPort)
	testrig.Eventually(t, 30*time.Second, "Jaeger's query API answers", func() bool {
		resp, err := http.Get(queryURL + "/api/services")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})

	srv, err := natsproc.Start(natsproc.Config{Name: "jaeger-test", StoreDir: filepath.Join(dir, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop) // after the services (cleanups run last first)
	// Spans leave each process every 200 ms (the batch span processor's delay), not every 5 s.
	env := []string{fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", otlpPort), "OTEL_BSP_SCHEDULE_DELAY=200"}
	spec := filepath.Join(root, "examples", "ocr-chain.yaml")
	startProcess(t, dir, "planner", env, sleipnir, "planner", "--nats", srv.URL(), "--pipeline", spec, "--storage", "memory")
	startProcess(t, dir, "frontend", env, sleipnir, "frontend", "--nats", srv.URL(), "--id", "fe1",
		"--http", fmt.Sprintf("127.0.0.1:%d", httpPort))
	for i := range 4 {
		id := fmt.Sprintf("w%d", i+1)
		startProcess(t, dir, id, env, sleipnir, "worker", "--nats", srv.URL(), "--id", id)
	}

	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Until the plan is out and the workers serve it, requests fail or go late.
	testrig.Eventually(t, 60*time.Second, "the system serves a request", func() bool {
		m, err := nc.Request(wire.InferSubject("ocr-chain"), inputRequest(t), 5*time.Second)
		return err == nil && decodeReply(t, m).Status == wire.StatusOK
	})

	const traceID, clientSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	msg := nats.NewMsg(wire.InferSubject("ocr-chain"))
	msg.Data = inputRequest(t)
	msg.Header.Set("traceparent", "00-"+traceID+"-"+clientSpan+"-01")
	m, err := nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rep := decodeReply(t, m)
	if rep.Status != wire.StatusOK || rep.TraceID != traceID || m.Header.Get(wire.HeaderTraceID) != traceID {
		t.Fatalf("reply status %q, trace id %q, header %q: want ok and the client's trace, %s", rep.Status,
			rep.TraceID, m.Header.Get(wire.HeaderTraceID), traceID)
	}
	read := false
	for _, r := range rep.Results {
		read = read || len(r.Path) == 2
	}
	var problems []string
	var spans []hopSpan
	var services map[string]string
	if err := testrig.WaitFor(30*time.Second, "Jaeger holds every hop's span", func() bool {
		var complete bool
		if spans, services, err = fetchTrace(queryURL, traceID); err != nil {
			problems = []string{err.Error()}
			return false
		}
		problems, complete = checkHops(spans, "ocr-chain", clientSpan, read)
		return complete
	}); err != nil {
		t.Fatalf("%v: %v", err, problems)
	}
	for _, p := range problems {
		t.Error(p)
	}
	hops := 0
	for _, s := range spans {
		want := "sleipnir-worker"
		if s.Name == "process "+wire.InferSubject("ocr-chain") {
			want = "sleipnir-frontend"
		} else if !strings.HasPrefix(s.Name, "process ") {
			continue
		}
		hops++
		if services[s.ID] != want {
			t.Errorf("span %q comes from service %q, want %q", s.Name, services[s.ID], want)
		}
	}
	t.Logf("trace %s in Jaeger: %d spans, %d of them a frontend's or a hop's process span (lines read: %v)\n%s",
		traceID, len(spans), hops, read, traceTree(spans, services, clientSpan))

	// Over HTTP: the response names its trace (header and the OIP parameters), and Jaeger has it.
	body := `{"inputs": [{"name": "image", "datatype": "FP32", "shape": [8, 24], "data": [` +
		strings.TrimSuffix(strings.Repeat("0,", 8*24), ",") + `]}]}`
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v2/models/ocr-chain/infer", httpPort),
		strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(wire.HeaderContentType, wire.ContentJSON)
	ids := httpTraceIDs(t, req)
	httpTrace := ids[0]
	if len(httpTrace) != 32 || ids != [3]string{httpTrace, httpTrace, httpTrace} {
		t.Fatalf("HTTP response: header %s, parameters.trace_id and trace_id %q: want one trace id", wire.HeaderTraceID, ids)
	}
	testrig.Eventually(t, 30*time.Second, "Jaeger holds the HTTP request's trace, its server span first", func() bool {
		spans, _, err := fetchTrace(queryURL, httpTrace)
		if err != nil {
			return false
		}
		for _, s := range spans {
			if s.Name == "POST /v2/models/{name}/infer" && s.Kind == "server" && s.Parent == "" {
				return true
			}
		}
		return false
	})
}
