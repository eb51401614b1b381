package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sleipnir-serving/sleipnir/tools/chaos"
)

// loadFlags is a repeatable --load PIPELINE=QPS.
type loadFlags map[string]float64

func (l loadFlags) String() string { return "" }
func (l loadFlags) Set(v string) error {
	name, rate, ok := strings.Cut(v, "=")
	qps, err := strconv.ParseFloat(rate, 64)
	if !ok || name == "" || err != nil || qps <= 0 {
		return fmt.Errorf("%q: want PIPELINE=QPS with QPS above 0", v)
	}
	l[name] = qps
	return nil
}

// runSoak runs the soak (tools/chaos soak.go) on the cluster deployment and prints its verdict; it fails unless the
// soak passed.
func runSoak(args []string) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	var cfg chaos.SoakConfig
	topology := registerTopologyFlags(fs, &cfg.Config)
	fs.StringVar(&cfg.Loadgen, "loadgen", filepath.Join(filepath.Dir(cfg.Sleipnir), "loadgen"), "the loadgen binary")
	fs.IntVar(&cfg.Nodes, "nodes", 3, "nats-server processes, clustered")
	fs.BoolVar(&cfg.Netns, "netns", false, "run every process in a network namespace of its own (needs root and ip)")
	loads := loadFlags{}
	fs.Var(loads, "load", "`PIPELINE=QPS`, repeatable: each pipeline's steady load (every pipeline served needs one)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long to measure, after --settle")
	fs.DurationVar(&cfg.Settle, "settle", 2*time.Minute, "load sent before measuring: the demand estimates, plans and "+
		"admission limits settle")
	fs.DurationVar(&cfg.Every, "fault-every", 0, "time between faults, in rotation: a worker killed, a NATS node "+
		"killed and restarted, a frontend restarted (default a fifth of --duration, at most 5m)")
	fs.DurationVar(&cfg.Recovery, "recovery", 30*time.Second, "each fault's recovery window after its victim's "+
		"return, whose violations are the fault's")
	fs.DurationVar(&cfg.Sample, "sample", 5*time.Second, "how often every process's memory and goroutines are read")
	fs.DurationVar(&cfg.MemWarmup, "mem-warmup", 0, "left out of each process's memory series, from the "+
		"measurement's start or its restart (default a fifth of --duration)")
	fs.DurationVar(&cfg.MemWindow, "mem-window", 0, "each compared window of a process's memory series (default a "+
		"tenth of --duration)")
	fs.StringVar(&cfg.Dir, "log-dir", "", "keep every process's log and soak.json (events, series, samples) here")
	deployAuth := fs.Bool("deploy-auth", false, "run against the deployment's users and permissions, a fresh nkey "+
		"per process")
	if err := fs.Parse(args); err != nil {
		return err
	}
	topology.apply(&cfg.Config)
	cfg.Loads = loads
	auth, cleanup, err := chaosAuth(*deployAuth, "", userFlags{}, cfg.Workers)
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.Auth = auth
	cfg.Progress = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := chaos.RunSoak(ctx, cfg)
	if err != nil {
		return err
	}
	verdict := res.Judge()
	chaos.WriteSoak(os.Stdout, res, verdict)
	if !verdict.Pass {
		return errors.New("the soak failed")
	}
	return nil
}
