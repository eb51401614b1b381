// Command loadgen sends open-loop load (Poisson, or Gamma arrivals with --cv) to a Sleipnir pipeline over NATS and reports what came back.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// cmdLine is what loadgen's flags give: the run's Config, and what main reads or parses into it.
type cmdLine struct {
	cfg                                              Config
	url, inboxPrefix, shape, images, workload, steps string
	natsAuth                                         bus.ClientAuth
	asJSON, retry                                    bool
	cv                                               float64
}

// parseFlags registers loadgen's flags and parses the command line.
func parseFlags() *cmdLine {
	var c cmdLine
	cfg := &c.cfg
	flag.StringVar(&c.url, "nats", envOr("SLEIPNIR_NATS", "nats://127.0.0.1:4222"), "NATS server URL; several: comma-separated (env SLEIPNIR_NATS)")
	// A client user may only send requests; --steps also reads the plan, which takes an observer.
	c.natsAuth.RegisterFlags(flag.CommandLine)
	// Each NATS user may read replies on its own prefix only, named after the user (pkg/auth).
	flag.StringVar(&c.inboxPrefix, "inbox-prefix", envOr("SLEIPNIR_INBOX_PREFIX", auth.User{Role: auth.Client}.Inbox()),
		"where replies come: the NATS user's own inbox prefix, _INBOX.<user> (observer: _INBOX.observer; a tenant's "+
			"client-<tenant>: _INBOX.client-<tenant>) (env SLEIPNIR_INBOX_PREFIX)")
	flag.BoolVar(&c.asJSON, "json", false, "print the summary as one JSON object on the last line")
	flag.StringVar(&cfg.Pipeline, "pipeline", "", "pipeline name (required)")
	flag.Float64Var(&cfg.QPS, "qps", 100, "mean arrival rate, requests per second")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to send (and measure)")
	flag.DurationVar(&cfg.Warmup, "warmup", 0, "how long to send before measuring (the routing settles on the demand)")
	flag.DurationVar(&cfg.Timeout, "timeout", 0, "relative deadline of each request (default: the pipeline's SLO)")
	flag.DurationVar(&cfg.Grace, "grace", 5*time.Second, "how long past its deadline a request may go unanswered before it counts as lost")
	flag.StringVar(&c.shape, "input-shape", "64,192", "shape of the FP32 input tensor \"image\" (the emulated examples declare [-1, -1])")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of arrivals and input values")
	flag.StringVar(&c.images, "images", "", "a labelled OCR set's `DIR` (make data makes data/ocr): send its images in turn and check the replies against their ground truth")
	flag.BoolVar(&cfg.Series, "series", false, "with --json: add the per-second series (sent, ok, violations, lost, duplicates by second of sending)")
	flag.BoolVar(&c.retry, "retry", true, "what a client should do to lose nothing: after a reconnect, send again the requests "+
		"unanswered when the connection dropped; retry \"no responders\" after a short wait; both within the deadline")
	flag.StringVar(&c.workload, "workload", "", "send a workload of the simulator's instead of --qps for --duration: "+
		"constant:QPS:D, steps:QPS:D,QPS:D,..., ramp:FROM:TO:D, diurnal:MIN:MAX:D, trace:FILE[:MIN:MAX[:D]], parts "+
		"joined by + each with its own :cv=X (after --warmup at its first rate); with --series, its seconds line up "+
		"with bin/sleipnir sim's")
	flag.Float64Var(&c.cv, "cv", 1, "coefficient of variation of the inter-arrival times, as the simulator's --cv: 1 "+
		"is Poisson, above 1 Gamma arrivals burstier than Poisson (with --qps or --workload; the warmup stays Poisson)")
	flag.StringVar(&c.steps, "steps", "", "step the demand: QPS:DURATION,... (each after --warmup at its rate); "+
		"prints a line per step with the plan the planner published by its end")
	flag.Parse()
	cfg.NoRetry = !c.retry
	return &c
}

// config completes the run's Config with what the flags name: the input shape, the workload, the labelled set.
func (c *cmdLine) config() (Config, error) {
	cfg := c.cfg
	var err error
	if cfg.InputShape, err = parseShape(c.shape); err != nil {
		return cfg, err
	}
	switch {
	case c.workload != "":
		if cfg.Workload, err = workload.Parse(c.workload, c.cv); err != nil {
			return cfg, fmt.Errorf("--workload: %w", err)
		}
	case c.cv != 1:
		// Other than Poisson: the constant workload at --qps, whose arrivals pkg/workload draws as the simulator's.
		if c.steps != "" {
			return cfg, errors.New("--cv applies to --qps or --workload, not to --steps")
		}
		cfg.Workload = workload.Constant(cfg.QPS, cfg.Duration)
		cfg.Workload.CV = c.cv
		if err = cfg.Workload.Validate(); err != nil {
			return cfg, fmt.Errorf("--cv: %w", err)
		}
	}
	if c.images != "" {
		if cfg.Images, err = ocr.ReadSet(c.images); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

func main() {
	c := parseFlags()
	if c.cfg.Pipeline == "" {
		fmt.Fprintln(os.Stderr, "loadgen: --pipeline is required")
		flag.Usage()
		os.Exit(2)
	}
	cfg, err := c.config()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	opts, err := c.natsAuth.Options()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	opts = append(opts, nats.CustomInboxPrefix(c.inboxPrefix))
	nc, err := nats.Connect(c.url, append(opts, ClientOptions("sleipnir-loadgen")...)...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: cannot connect to NATS at %s: %v (is `make run` running?)\n", bus.RedactURL(c.url), err)
		os.Exit(1)
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.steps != "" {
		steps, err := workload.ParseSteps(c.steps)
		if err == nil {
			err = runSteps(ctx, nc, cfg, steps, c.asJSON)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		return
	}
	var stopCost func() PlanCost
	if js, jerr := jetstream.New(nc); jerr == nil {
		stopCost = watchCost(ctx, js, cfg.Pipeline)
	}
	sum, err := Run(ctx, nc, cfg, os.Stderr)
	if stopCost != nil {
		sum.PlanCost = stopCost()
	}
	printSummary(sum)
	if c.asJSON {
		line, _ := json.Marshal(sum)
		fmt.Println(string(line))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func printSummary(s Summary) {
	fmt.Printf("pipeline %s: %d sent in %.1fs (%.1f/s of %.1f/s asked)\n", s.Pipeline, s.Sent, s.DurationS, s.AchievedQPS, s.QPS)
	fmt.Printf("  ok %d  degraded %d  partial %d  dropped %d  late %d  errors %d  lost %d  refused %d\n", s.OK,
		s.Degraded, s.Partial, s.Dropped, s.Late, s.Errors, s.Lost, s.Refused)
	if s.Resent+s.Retried+s.Duplicates+s.LateReplies+s.ExtraReplies > 0 {
		fmt.Printf("  attempts resent after a reconnect %d, retried after no responders %d; duplicate replies %d, "+
			"late replies %d, extra replies %d\n", s.Resent, s.Retried, s.Duplicates, s.LateReplies, s.ExtraReplies)
	}
	fmt.Printf("  latency p50 %.1f ms  p95 %.1f ms  p99 %.1f ms  mean %.1f ms\n", s.P50Ms, s.P95Ms, s.P99Ms, s.MeanLatencyMs)
	fmt.Printf("  SLO violations %.2f%% (every reply that is not ok, and every lost request)\n", 100*s.SLOViolationRatio)
	if s.Refused > 0 {
		fmt.Printf("  refused at once %d (p99 %.1f ms; the latencies above are the accepted requests'); violations "+
			"among the accepted %.2f%%\n", s.Refused, s.RefusedP99Ms, 100*s.AcceptedViolationRatio)
	}
	fmt.Printf("  mean accuracy %.4f (of the ok and partial replies)\n", s.MeanAccuracy)
	if c := s.PlanCost; c.Max > 0 {
		fmt.Printf("  plan cost per hour: mean %.2f, max %.2f, last %.2f (%d samples of the plan in force)\n", c.Mean,
			c.Max, c.Last, c.Samples)
	}
	if s.PredictedAccuracy > 0 || s.MeasuredAccuracy > 0 {
		fmt.Printf("  lines read exactly %.4f, profile predicts %.4f (ok replies against ground truth); page character accuracy %.4f\n",
			s.MeasuredAccuracy, s.PredictedAccuracy, s.PageCharAccuracy)
	}
	if s.FirstError != "" {
		fmt.Printf("  first error: %s\n", s.FirstError)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
