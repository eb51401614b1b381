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
	"strconv"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/buildinfo"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
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
  soak      the cluster under a steady load of every pipeline for long, a fault every few minutes, memory watched
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
	case "soak":
		err = runSoak(args)
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
	return loadPipelinesCascades(files, true)
}

// loadPipelinesCascades is loadPipelines, with the tasks' cascades left out unless cascades.
func loadPipelinesCascades(files []string, cascades bool) ([]*pipeline.Spec, error) {
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
		if !cascades {
			s = s.WithoutCascades()
		}
		specs = append(specs, s)
	}
	return specs, nil
}

func runUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	var c common
	c.register(fs, "an external NATS server URL; empty starts an embedded server")
	var files pipelineFiles
	fs.Var(&files, "pipeline", "pipeline spec YAML `FILE`, repeatable (default examples/traffic.yaml)")
	workersFlag := fs.String("workers", "20", "workers to start: `N` (of the default class) or CLASS=N,... per "+
		"server class (e.g. cpu=12,fast=4; docs/classes.md)")
	port := fs.Int("nats-port", 4222, "client port of the embedded NATS server (0: in-process only)")
	host := fs.String("nats-host", "127.0.0.1", "address the embedded NATS server listens on")
	stateDir := fs.String("state-dir", envOr("SLEIPNIR_STATE_DIR", envOr("SLEIPNIR_DATA_DIR", "state")),
		"`DIR` of the embedded server's JetStream files: streams and the KV bucket (env SLEIPNIR_STATE_DIR)")
	fs.StringVar(stateDir, "data-dir", *stateDir, "the former name of --state-dir")
	fresh := fs.Bool("fresh", true, "start the embedded server on an empty state: remove the JetStream files of an "+
		"earlier run (its plans, workers and queued tasks); --fresh=false keeps them")
	metricsAddr := metricsFlag(fs, DefaultUpMetricsAddr)
	permissions := fs.Bool("nats-auth", false, "give the embedded server the deployment's users and permissions "+
		"(pkg/auth): each service connects as its role, and connections without credentials are clients, which "+
		"may only send requests")
	// Each service's own flags, as its own command takes them.
	plannerFlags := planner.RegisterFlags(fs)
	fcfg := frontend.Config{HTTPAddr: "127.0.0.1:8080"}
	fcfg.RegisterFlags(fs)
	var wcfg worker.Config
	wcfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(files) == 0 {
		files = pipelineFiles{"examples/traffic.yaml"}
	}
	if *permissions && c.natsURL != "" {
		return errors.New("--nats-auth configures the embedded server; with --nats, the external server's configuration decides")
	}
	specs, err := loadPipelines(files)
	if err != nil {
		return err
	}
	workers, classes, err := parseWorkers(*workersFlag)
	if err != nil {
		return err
	}
	pcfg, err := plannerFlags.Config(specs)
	if err != nil {
		return err
	}
	ctx, log, stop, err := c.start("up")
	if err != nil {
		return err
	}
	defer stop()
	// The server's payload limit leaves room for headers above the largest request.
	maxPayload := int32(fcfg.MaxRequestBytes + 64<<10)
	return up.Run(ctx, up.Config{NATSURL: c.natsURL, Auth: c.auth, Permissions: *permissions, DataDir: *stateDir,
		Fresh: *fresh, NATSHost: *host, NATSPort: *port, MaxPayload: maxPayload, Pipelines: specs, Workers: workers,
		WorkerClasses: classes, Planner: pcfg, Frontend: fcfg, Worker: wcfg, MetricsAddr: *metricsAddr, Logger: log,
		Started: func(url string) {
			names := make([]string, len(specs))
			for i, s := range specs {
				names[i] = s.Name
			}
			log.Info("sleipnir is up", "nats", bus.RedactURL(url), "http", fcfg.HTTPAddr, "pipelines", strings.Join(names, ","),
				"workers", *workersFlag, "requests", wire.InferSubject("<pipeline>"))
		}})
}

// parseWorkers reads up's --workers: "N" (N workers of the default class; 0 runs the server, planner and frontend
// only) or "CLASS=N,..." (classes nil for the former).
func parseWorkers(s string) (n int, classes map[string]int, err error) {
	if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
		if n < 0 {
			return 0, nil, fmt.Errorf("--workers %d: want 0 or more (0 runs the server, planner and frontend only)", n)
		}
		return n, nil, nil
	}
	classes, err = plan.ParseServers(s)
	if err != nil {
		return 0, nil, fmt.Errorf("--workers: %w", err)
	}
	for _, c := range classes {
		n += c
	}
	return n, classes, nil
}

func runFrontend(args []string) error {
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	var c common
	c.register(fs, "NATS server URL")
	cfg := frontend.Config{HTTPAddr: ":8080"}
	fs.StringVar(&cfg.ID, "id", "", "frontend id (default hostname-pid)")
	cfg.RegisterFlags(fs)
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
		cfg.Metrics, cfg.Logger = metrics.NewFrontend(reg), log
		f, err := frontend.New(nc, cfg)
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
	var cfg worker.Config
	fs.StringVar(&cfg.ID, "id", "", "worker id (default hostname-pid); with NATS permissions, the one its user may heartbeat as")
	fs.StringVar(&cfg.Class, "class", envOr("SLEIPNIR_CLASS", wire.DefaultClass), "the worker's server `CLASS`: it "+
		"hosts only variants with a profile for it (docs/classes.md; env SLEIPNIR_CLASS)")
	cfg.RegisterFlags(fs)
	metricsAddr := metricsFlag(fs, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.ID == "" {
		cfg.ID = worker.DefaultID() // before connecting: the connection's inbox prefix is named after the worker
	}
	return c.serve("worker", auth.User{Role: auth.Worker, WorkerID: cfg.ID}, func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
		reg, stop, err := serveMetrics(*metricsAddr, log)
		if err != nil {
			return err
		}
		defer stop()
		cfg.Metrics, cfg.Logger = metrics.NewWorker(reg), log
		w, err := worker.New(nc, cfg)
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
	plannerFlags := planner.RegisterFlags(fs)
	metricsAddr := metricsFlag(fs, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("--pipeline is required")
	}
	specs, err := loadPipelines(files)
	if err != nil {
		return err
	}
	cfg, err := plannerFlags.Config(specs)
	if err != nil {
		return err
	}
	return c.serve("planner", auth.User{Role: auth.Planner}, func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
		reg, stop, err := serveMetrics(*metricsAddr, log)
		if err != nil {
			return err
		}
		defer stop()
		cfg.Metrics, cfg.Logger = reg, log
		p, err := planner.New(nc, cfg)
		if err != nil {
			return err
		}
		return p.Run(ctx)
	})
}

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
