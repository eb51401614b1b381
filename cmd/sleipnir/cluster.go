package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sleipnir-serving/sleipnir/tools/chaos"
)

// runCluster starts the deployment of `make cluster` as processes: three clustered nats-server processes, the
// planner, two frontends and the workers, each given every server's URL, and prints how to point loadgen at it.
func runCluster(args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	var cfg chaos.Config
	topology := registerTopologyFlags(fs, &cfg)
	fs.IntVar(&cfg.Nodes, "nodes", 3, "nats-server processes, clustered")
	netns := fs.String("netns", "auto", "run every process in a network namespace of its own, with its own address "+
		"(veth pairs on a bridge): on, off, or auto (on where the machine allows it: root and ip)")
	dir := fs.String("dir", filepath.Join("state", "cluster"), "`DIR` of the servers' JetStream stores and every "+
		"process's log; emptied at start")
	deployAuth := fs.Bool("deploy-auth", false, "run with the deployment's users and permissions (pkg/auth), a "+
		"fresh nkey per process, written under --dir")
	if err := fs.Parse(args); err != nil {
		return err
	}
	topology.apply(&cfg)
	switch *netns {
	case "on":
		cfg.Netns = true
	case "auto":
		cfg.Netns = chaos.NetnsAvailable() == nil
	case "off":
	default:
		return fmt.Errorf("--netns %q: want on, off or auto", *netns)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(abs); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(abs, "keys"), 0o700); err != nil {
		return err
	}
	if *deployAuth {
		if cfg.Auth, err = chaos.DeployAuth(filepath.Join(abs, "keys"), cfg.Workers); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sys, err := chaos.StartTopology(ctx, cfg, abs)
	if err != nil {
		return err
	}
	defer sys.Close()
	where := "on loopback"
	if cfg.Netns {
		where = "each process in its own network namespace"
	}
	fmt.Printf("sleipnir cluster is up: %d nats-server nodes, planner, 2 frontends, %d workers, %s (logs in %s)\n",
		len(sys.Nodes), cfg.Workers, where, abs)
	for _, n := range sys.Nodes {
		fmt.Printf("  %s  %s  (monitoring %s)\n", n.Name(), n.URL(), n.MonitorURL())
	}
	fmt.Println("load it with:")
	for _, name := range sys.Pipelines() {
		fmt.Printf("  bin/loadgen %s --pipeline %s --qps 200 --duration 60s\n", strings.Join(sys.ClientArgs(), " "), name)
	}
	fmt.Println("Ctrl-C stops it.")
	<-ctx.Done()
	return nil
}
