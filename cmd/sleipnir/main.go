// Command sleipnir runs any Sleipnir service, or all of them in one process (up).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/buildinfo"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
	"github.com/sleipnir-serving/sleipnir/pkg/onnx"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/telemetry"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/frontend"
	"github.com/sleipnir-serving/sleipnir/services/planner"
	"github.com/sleipnir-serving/sleipnir/services/up"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

const usage = `usage: sleipnir <command> [flags]

commands:
  up        the whole system in one process: embedded NATS + JetStream, planner, frontend, workers
  frontend  accept requests on NATS (sleipnir.infer.<pipeline>) and HTTP (KServe v2)
  worker    serve the model variant the planner assigns
  planner   publish pipelines and plans, assign workers
  plan      solve the allocation MILP for a demand (or a sweep of demands) and print the plan
  sim       simulate a pipeline under a workload, per policy (loki, inferline, proteus, static), and report
  profile   measure an OCR pipeline's variants (latency, swap time, fan-out, accuracy) and write its profile file
  ocrdata   generate the labelled OCR set (document images and their ground truth)
  nats-auth generate the nkeys of a deployment and render its NATS authorization (deploy/nats-auth.conf)
  chaos     the fault suite: the services as processes around nats-server, under load, one fault at a time
  cluster   three clustered nats-server processes and the services as processes around them (make cluster)
  version   print the version (also --version)

Run 'sleipnir <command> -h' for the flags of a command.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "up":
		err = runUp(args)
	case "frontend":
		err = runFrontend(args)
	case "worker":
		err = runWorker(args)
	case "planner":
		err = runPlanner(args)
	case "plan":
		err = runPlan(args)
	case "sim":
		err = runSim(args)
	case "profile":
		err = runProfile(args)
	case "ocrdata":
		err = runOCRData(args)
	case "nats-auth":
		err = runNATSAuth(args)
	case "chaos":
		err = runChaos(args)
	case "cluster":
		err = runCluster(args)
	case "version", "--version", "-version":
		fmt.Println("sleipnir", buildinfo.Version())
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "sleipnir: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "sleipnir "+cmd+":", err)
		os.Exit(1)
	}
}

// common holds the flags every service has.
type common struct {
	natsURL  string
	auth     bus.ClientAuth
	logLevel string
	logJSON  bool
}

func (c *common) register(fs *flag.FlagSet, natsHelp string) {
	fs.StringVar(&c.natsURL, "nats", envOr("SLEIPNIR_NATS", ""), natsHelp+"; several: comma-separated (env SLEIPNIR_NATS)")
	c.auth.RegisterFlags(fs)
	fs.StringVar(&c.logLevel, "log-level", envOr("SLEIPNIR_LOG_LEVEL", "info"), "debug, info, warn or error (env SLEIPNIR_LOG_LEVEL)")
	fs.BoolVar(&c.logJSON, "log-json", false, "log as JSON lines")
}

// start sets up logging, tracing and signal handling, once, for whichever service runs.
func (c *common) start(service string) (context.Context, *slog.Logger, func(), error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, nil, nil, fmt.Errorf("--log-level %q: %w", c.logLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if c.logJSON {
		h = slog.NewJSONHandler(os.Stderr, opts)
	}
	log := slog.New(h)
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	shutdown, err := telemetry.Setup(ctx, "sleipnir-"+service)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return ctx, log, func() { _ = shutdown(context.Background()); stop() }, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// pipelineFiles is a repeatable --pipeline flag.
type pipelineFiles []string

func (p *pipelineFiles) String() string     { return strings.Join(*p, ",") }
func (p *pipelineFiles) Set(v string) error { *p = append(*p, v); return nil }

func loadPipelines(files []string) ([]*pipeline.Spec, error) {
	var specs []*pipeline.Spec
	seen := map[string]string{}
	for _, f := range files {
		s, err := pipeline.Load(f)
		if err != nil {
			return nil, err
		}
		if other, dup := seen[s.Name]; dup {
			return nil, fmt.Errorf("%s and %s both define pipeline %q", other, f, s.Name)
		}
		seen[s.Name] = f
		specs = append(specs, s)
	}
	return specs, nil
}

func storageFlag(fs *flag.FlagSet) *string {
	return fs.String("storage", "file", "JetStream storage of task streams and the KV bucket: file or memory")
}

func replicasFlag(fs *flag.FlagSet) *int {
	return fs.Int("replicas", 0, "copies of the task streams and the KV bucket the NATS cluster keeps (0: 3 on a "+
		"cluster of three servers or more, else 1); a stream that already has more keeps them")
}

func parseStorage(s string) (jetstream.StorageType, error) {
	switch s {
	case "file":
		return jetstream.FileStorage, nil
	case "memory":
		return jetstream.MemoryStorage, nil
	}
	return 0, fmt.Errorf("--storage %q: want file or memory", s)
}

// modelsFlag is where onnx variants' model files (and the ONNX Runtime library) are.
func modelsFlag(fs *flag.FlagSet) *string {
	return fs.String("models", onnx.ModelsDir(), "`DIR` of the ONNX models and runtime that make models fetches (env "+onnx.EnvModels+"; the library: env "+onnx.EnvLibrary+")")
}

func runUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	var c common
	c.register(fs, "an external NATS server URL; empty starts an embedded server")
	var files pipelineFiles
	fs.Var(&files, "pipeline", "pipeline spec YAML `FILE`, repeatable (default examples/traffic.yaml)")
	workers := fs.Int("workers", 20, "number of workers")
	models := modelsFlag(fs)
	port := fs.Int("nats-port", 4222, "client port of the embedded NATS server (0: in-process only)")
	host := fs.String("nats-host", "127.0.0.1", "address the embedded NATS server listens on")
	stateDir := fs.String("state-dir", envOr("SLEIPNIR_STATE_DIR", envOr("SLEIPNIR_DATA_DIR", "state")),
		"`DIR` of the embedded server's JetStream files: streams and the KV bucket (env SLEIPNIR_STATE_DIR)")
	fs.StringVar(stateDir, "data-dir", *stateDir, "the former name of --state-dir")
	fresh := fs.Bool("fresh", true, "start the embedded server on an empty state: remove the JetStream files of an "+
		"earlier run (its plans, workers and queued tasks); --fresh=false keeps them")
	httpAddr := fs.String("http", "127.0.0.1:8080", "KServe v2 HTTP address of the frontend (empty disables it)")
	metricsAddr := metricsFlag(fs, DefaultUpMetricsAddr)
	maxReq := fs.Int("max-request-bytes", frontend.DefaultMaxRequestBytes, "largest request payload accepted")
	intake := registerIntakeFlags(fs)
	storage := storageFlag(fs)
	replicas := replicasFlag(fs)
	ctl := control.RegisterFlags(fs)
	permissions := fs.Bool("nats-auth", false, "give the embedded server the deployment's users and permissions "+
		"(pkg/auth): each service connects as its role, and connections without credentials are clients, which "+
		"may only send requests")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(files) == 0 {
		files = pipelineFiles{"examples/traffic.yaml"}
	}
	if *permissions && c.natsURL != "" {
		return errors.New("--nats-auth configures the embedded server; with --nats, the external server's configuration decides")
	}
	st, err := parseStorage(*storage)
	if err != nil {
		return err
	}
	specs, err := loadPipelines(files)
	if err != nil {
		return err
	}
	if *workers < 0 {
		return fmt.Errorf("--workers %d: want 0 or more (0 runs the server, planner and frontend only)", *workers)
	}
	cc, err := ctl.Config()
	if err != nil {
		return err
	}
	system, err := ctl.System(specs...)
	if err != nil {
		return err
	}
	ctx, log, stop, err := c.start("up")
	if err != nil {
		return err
	}
	defer stop()
	// The server's payload limit leaves room for headers above the largest request.
	maxPayload := int32(*maxReq + 64<<10)
	return up.Run(ctx, up.Config{NATSURL: c.natsURL, Auth: c.auth, Permissions: *permissions, DataDir: *stateDir, Fresh: *fresh, NATSHost: *host, NATSPort: *port,
		MaxPayload: maxPayload, Pipelines: specs, Workers: *workers, ModelsDir: *models, HTTPAddr: *httpAddr, MaxRequestBytes: *maxReq,
		IntakeWorkers: *intake.workers, IntakeQueue: *intake.queue, MaxInFlight: *intake.maxInFlight,
		RequestBacklog: *intake.backlog, MaxTimeout: *intake.maxTimeout, Admit: *intake.admission, Storage: st, Replicas: *replicas, System: system, Control: cc, MetricsAddr: *metricsAddr, Logger: log,
		Started: func(url string) {
			names := make([]string, len(specs))
			for i, s := range specs {
				names[i] = s.Name
			}
			log.Info("sleipnir is up", "nats", bus.RedactURL(url), "http", *httpAddr, "pipelines", strings.Join(names, ","),
				"workers", *workers, "requests", wire.InferSubject("<pipeline>"))
		}})
}

// intakeFlags are the frontend's intake settings, for `frontend` and `up` alike.
type intakeFlags struct {
	workers, queue, maxInFlight, backlog *int
	maxTimeout                           *time.Duration
	admission                            *bool
}

func registerIntakeFlags(fs *flag.FlagSet) intakeFlags {
	return intakeFlags{
		workers: fs.Int("intake-workers", frontend.DefaultIntakeWorkers, "requests decoded and published at once"),
		queue: fs.Int("intake-queue", frontend.DefaultIntakeQueue, "requests that may wait for an intake worker; "+
			"more are refused as overloaded"),
		maxInFlight: fs.Int("max-in-flight", frontend.DefaultMaxInFlight, "requests held at once, from arrival to "+
			"reply; more are refused as overloaded"),
		backlog: fs.Int("request-backlog", frontend.DefaultRequestBacklog, "requests that may wait for the frontend "+
			"to take them in; more are dropped unanswered, and counted"),
		maxTimeout: fs.Duration("max-timeout", 0, "furthest ahead a request's deadline may be (default the larger "+
			"of 1m and 10 SLOs)"),
		admission: fs.Bool("admission", false, "refuse at once what the plan cannot serve, by class, and requests "+
			"whose deadline the queue ahead cannot meet (docs/admission.md); false: only the bounds above refuse"),
	}
}

func runFrontend(args []string) error {
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	var c common
	c.register(fs, "NATS server URL")
	id := fs.String("id", "", "frontend id (default hostname-pid)")
	httpAddr := fs.String("http", ":8080", "KServe v2 HTTP address (empty disables it)")
	maxReq := fs.Int("max-request-bytes", frontend.DefaultMaxRequestBytes, "largest request payload accepted")
	intake := registerIntakeFlags(fs)
	metricsAddr := metricsFlag(fs, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return c.serve("frontend", auth.User{Role: auth.Frontend}, func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
		reg, stop, err := serveMetrics(*metricsAddr, log)
		if err != nil {
			return err
		}
		defer stop()
		f, err := frontend.New(nc, frontend.Config{ID: *id, HTTPAddr: *httpAddr, MaxRequestBytes: *maxReq,
			IntakeWorkers: *intake.workers, IntakeQueue: *intake.queue, MaxInFlight: *intake.maxInFlight,
			RequestBacklog: *intake.backlog, MaxTimeout: *intake.maxTimeout, Admit: *intake.admission, Metrics: metrics.NewFrontend(reg), Logger: log})
		if err != nil {
			return err
		}
		return f.Run(ctx)
	})
}

func runWorker(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	var c common
	c.register(fs, "NATS server URL")
	id := fs.String("id", "", "worker id (default hostname-pid); with NATS permissions, the one its user may heartbeat as")
	models := modelsFlag(fs)
	metricsAddr := metricsFlag(fs, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *id == "" {
		*id = worker.DefaultID() // before connecting: the connection's inbox prefix is named after the worker
	}
	return c.serve("worker", auth.User{Role: auth.Worker, WorkerID: *id}, func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
		reg, stop, err := serveMetrics(*metricsAddr, log)
		if err != nil {
			return err
		}
		defer stop()
		w, err := worker.New(nc, worker.Config{ID: *id, ModelsDir: *models, Metrics: metrics.NewWorker(reg), Logger: log})
		if err != nil {
			return err
		}
		return w.Run(ctx)
	})
}

func runPlanner(args []string) error {
	fs := flag.NewFlagSet("planner", flag.ContinueOnError)
	var c common
	c.register(fs, "NATS server URL")
	var files pipelineFiles
	fs.Var(&files, "pipeline", "pipeline spec YAML `FILE`, repeatable (required)")
	storage := storageFlag(fs)
	replicas := replicasFlag(fs)
	ctl := control.RegisterFlags(fs)
	ackWait := fs.Duration("ack-wait", bus.DefaultAckWait, "the variant consumers' ack wait: how long a fetched message may "+
		"stay unacknowledged before another replica gets it (workers mark batches that run longer in progress)")
	dlAge := fs.Duration("deadletter-max-age", bus.DefaultDeadLetterMaxAge, "how long the dead-letter stream keeps a "+
		"task message a worker set aside")
	dlBytes := fs.Int64("deadletter-max-bytes", bus.DefaultDeadLetterMaxBytes, "the dead-letter stream's size bound, "+
		"in bytes (the oldest messages go first)")
	metricsAddr := metricsFlag(fs, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("--pipeline is required")
	}
	if *dlAge <= 0 || *dlBytes <= 0 {
		return errors.New("--deadletter-max-age and --deadletter-max-bytes must be positive")
	}
	st, err := parseStorage(*storage)
	if err != nil {
		return err
	}
	specs, err := loadPipelines(files)
	if err != nil {
		return err
	}
	cc, err := ctl.Config()
	if err != nil {
		return err
	}
	system, err := ctl.System(specs...)
	if err != nil {
		return err
	}
	return c.serve("planner", auth.User{Role: auth.Planner}, func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
		reg, stop, err := serveMetrics(*metricsAddr, log)
		if err != nil {
			return err
		}
		defer stop()
		p, err := planner.New(nc, planner.Config{Pipelines: specs, Storage: st, Replicas: *replicas, System: system, AckWait: *ackWait,
			DeadLetterMaxAge: *dlAge, DeadLetterMaxBytes: *dlBytes, Config: cc, Metrics: reg, Logger: log})
		if err != nil {
			return err
		}
		return p.Run(ctx)
	})
}

// serve runs one service against the NATS server of --nats (default the local one), as user: replies come to the
// user's own inbox prefix, which its permissions let it read and no other user's do.
func (c *common) serve(service string, user auth.User, run func(context.Context, *nats.Conn, *slog.Logger) error) error {
	ctx, log, stop, err := c.start(service)
	if err != nil {
		return err
	}
	defer stop()
	nc, err := c.connect(service, user)
	if err != nil {
		return err
	}
	defer nc.Close()
	return run(ctx, nc, log)
}

// connect connects to the NATS server of --nats (default the local one) as user, with the user's inbox prefix.
func (c *common) connect(service string, user auth.User) (*nats.Conn, error) {
	url := c.natsURL
	if url == "" {
		url = nats.DefaultURL
	}
	opts, err := c.auth.Options()
	if err != nil {
		return nil, err
	}
	return bus.Connect(url, "sleipnir-"+service, append(opts, nats.CustomInboxPrefix(user.Inbox()))...)
}
