package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/tools/chaos"
)

// userFlags is a repeatable --user WHO=NAME:PASSWORD_FILE or WHO=nkey:SEED_FILE. The client and the observer read
// their replies on _INBOX.<NAME> (an nkey user: _INBOX.<WHO>).
type userFlags map[string]chaos.User

func (u userFlags) String() string { return "" }
func (u userFlags) Set(v string) error {
	who, rest, ok1 := strings.Cut(v, "=")
	name, file, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || who == "" || name == "" || file == "" {
		return fmt.Errorf("%q: want WHO=NAME:PASSWORD_FILE or WHO=nkey:SEED_FILE", v)
	}
	user := chaos.User{Name: name, PasswordFile: file}
	if name == "nkey" {
		user, name = chaos.User{NkeyFile: file}, who // an nkey user has no name: the deployment's are their roles'
	}
	if who == chaos.RoleClient || who == chaos.RoleObserver {
		user.Inbox = wire.ClientInboxPrefix(name) // the user's own, as the deployment's permissions name it
	}
	u[who] = user
	return nil
}

// topologyFlags are the flags of the deployment the suite, `cluster` and `soak` run: the binary, the pipelines, the
// workers and the planner's more flags.
type topologyFlags struct {
	pipelines   pipelineFiles
	plannerArgs string
}

func registerTopologyFlags(fs *flag.FlagSet, cfg *chaos.Config) *topologyFlags {
	self, _ := os.Executable()
	var t topologyFlags
	fs.StringVar(&cfg.Sleipnir, "sleipnir", self, "the sleipnir binary the services run from")
	fs.Var(&t.pipelines, "pipeline", "the pipeline spec `FILE` the planner serves, repeatable (default "+
		"examples/traffic.yaml); the fault suite loads the first")
	fs.IntVar(&cfg.Workers, "workers", 10, "worker processes")
	fs.StringVar(&t.plannerArgs, "planner-args", "", "more flags of the planner, space-separated (e.g. \"--replicas 3\")")
	return &t
}

// apply puts the parsed flags into cfg.
func (t *topologyFlags) apply(cfg *chaos.Config) {
	files := t.pipelines
	if len(files) == 0 {
		files = pipelineFiles{"examples/traffic.yaml"}
	}
	cfg.Pipeline, cfg.MorePipelines = files[0], files[1:]
	cfg.PlannerArgs = strings.Fields(t.plannerArgs)
}

func runChaos(args []string) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var cfg chaos.Config
	topology := registerTopologyFlags(fs, &cfg)
	fs.StringVar(&cfg.Loadgen, "loadgen", filepath.Join(filepath.Dir(cfg.Sleipnir), "loadgen"), "the loadgen binary")
	fs.Float64Var(&cfg.QPS, "qps", 100, "load, requests per second")
	fs.IntVar(&cfg.Nodes, "nodes", 1, "nats-server processes; 3 clusters them and runs the node faults (losing each "+
		"node in turn) unless --faults names others")
	fs.BoolVar(&cfg.Netns, "netns", false, "run every process in a network namespace of its own, joined by veth pairs "+
		"on a bridge (needs root and ip)")
	faults := fs.String("faults", "", "comma-separated faults to run (default all): "+strings.Join(chaos.Names(), ", "))
	short := fs.Bool("short", false, "the short version: the short faults, with shorter phases")
	asJSON := fs.Bool("json", false, "print one JSON object per fault instead of the table")
	markdown := fs.Bool("markdown", false, "print the table as Markdown (docs/faults.md's)")
	fs.StringVar(&cfg.Dir, "log-dir", "", "keep each fault's process logs here (default: a temporary directory, removed)")
	natsConf := fs.String("nats-conf", "", "nats-server configuration with users and permissions (enables the "+
		"forged-message faults)")
	users := userFlags{}
	fs.Var(users, "user", "`WHO=CREDS`: WHO=NAME:PASSWORD_FILE or WHO=nkey:SEED_FILE, repeatable: who a process (planner, fe1, fe2, "+
		"w01, ..., client, observer) or else a role (planner, frontend, worker, client, observer) connects as; "+
		"processes get --user NAME --password-file FILE, or --nkey FILE")
	deployAuth := fs.Bool("deploy-auth", false, "run against the deployment's users and permissions (pkg/auth, "+
		"deploy/nats-auth.conf) with a fresh nkey per process; enables the forged-message faults")
	if err := fs.Parse(args); err != nil {
		return err
	}
	topology.apply(&cfg)
	auth, cleanup, err := chaosAuth(*deployAuth, *natsConf, users, cfg.Workers)
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.Auth = auth
	var names []string
	if *faults != "" {
		names = strings.Split(*faults, ",")
	}
	selected, err := chaos.Select(names, *short, cfg.Nodes >= 3)
	if err != nil {
		return err
	}
	if *short {
		cfg.Short()
	} else {
		cfg.Full()
	}
	cfg.Progress = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rows, err := chaos.Run(ctx, cfg, selected)
	printRows(rows, *asJSON, *markdown)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if !r.Pass && r.Skipped == "" {
			return errors.New("some faults failed")
		}
	}
	return nil
}

// chaosAuth is the users and permissions the suite's system runs with: the deployment's (deployAuth: fresh nkeys
// for workers workers, in a directory cleanup removes), or natsConf's with users' credentials, or none (nil).
func chaosAuth(deployAuth bool, natsConf string, users userFlags, workers int) (auth *chaos.Auth, cleanup func(),
	err error) {
	switch {
	case deployAuth:
		if natsConf != "" || len(users) > 0 {
			return nil, nil, errors.New("--deploy-auth makes its own users: not with --nats-conf or --user")
		}
		dir, err := os.MkdirTemp("", "sleipnir-chaos-keys-*")
		if err != nil {
			return nil, nil, err
		}
		cleanup = func() { os.RemoveAll(dir) }
		if auth, err = chaos.DeployAuth(dir, workers); err != nil {
			cleanup()
			return nil, nil, err
		}
		return auth, cleanup, nil
	case natsConf != "":
		conf, err := os.ReadFile(natsConf)
		if err != nil {
			return nil, nil, err
		}
		return &chaos.Auth{Conf: string(conf), Users: users}, func() {}, nil
	case len(users) > 0:
		return nil, nil, errors.New("--user needs --nats-conf")
	}
	return nil, func() {}, nil
}

// printRows prints the suite's rows: one JSON object each, a Markdown table, or a text table.
func printRows(rows []chaos.Row, asJSON, markdown bool) {
	switch {
	case asJSON:
		for _, r := range rows {
			line, _ := json.Marshal(r)
			fmt.Println(string(line))
		}
	case markdown:
		chaos.WriteMarkdown(os.Stdout, rows)
	default:
		chaos.WriteTable(os.Stdout, rows)
	}
}
