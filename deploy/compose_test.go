// Package deploy_test checks docker-compose.yml and the image's Dockerfile without a Docker engine (none runs on the
// development and CI machines): the compose file is loaded by the compose-spec loader the way `docker compose` loads
// it (.env included), the NATS cluster's configuration by nats-server's own parser, the commands of the README and
// docs/deploy.md against both, and the Dockerfile's build is run as written.
package deploy_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

const (
	repoRoot      = ".."
	composeFile   = "docker-compose.yml"
	sleipnirImage = "sleipnir:local"
	secretsDir    = "/secrets"
	examplesDir   = "/etc/sleipnir/examples"
)

var natsNodes = []string{"nats-1", "nats-2", "nats-3"}

// loadProject loads the compose file as `docker compose` does in the repository with env as the shell's
// environment: .env fills what env does not set, and COMPOSE_PROFILES picks the profiles.
func loadProject(t *testing.T, env map[string]string) *types.Project {
	t.Helper()
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(repoRoot, composeFile)},
		cli.WithWorkingDirectory(repoRoot), cli.WithEnv(list), cli.WithEnvFiles(), cli.WithDotEnv,
		cli.WithDefaultProfiles())
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("loading %s: %v", composeFile, err)
	}
	return p
}

func sortedNames(s types.Services) []string {
	var names []string
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func workerNames() []string {
	var names []string
	for _, id := range auth.WorkerIDs(auth.DeployWorkers) {
		names = append(names, "worker-"+id)
	}
	return names
}

// flagValue is the value after flag in args, or "".
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func env(s types.ServiceConfig, key string) string {
	if v := s.Environment[key]; v != nil {
		return *v
	}
	return ""
}

func mountAt(s types.ServiceConfig, target string) (types.ServiceVolumeConfig, bool) {
	for _, v := range s.Volumes {
		if v.Target == target {
			return v, true
		}
	}
	return types.ServiceVolumeConfig{}, false
}

// goModVersion is the version go.mod requires of module.
func goModVersion(t *testing.T, module string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(module) + `\s+v(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("go.mod does not require %s", module)
	}
	return string(m[1])
}

func TestComposeClusterProfile(t *testing.T) {
	p := loadProject(t, nil)
	want := append([]string{"keys", "models", "planner", "frontend-1", "frontend-2", "prometheus", "grafana", "jaeger"},
		natsNodes...)
	want = append(want, workerNames()...)
	sort.Strings(want)
	if got := sortedNames(p.Services); !slices.Equal(got, want) {
		t.Fatalf("services of the default profile:\n got %v\nwant %v", got, want)
	}

	t.Run("nats nodes", func(t *testing.T) {
		version := goModVersion(t, "github.com/nats-io/nats-server/v2")
		dataVolumes := map[string]bool{}
		for _, name := range natsNodes {
			s := p.Services[name]
			// The server the tests run (make nats-server builds go.mod's version), and 2.12 or later.
			if s.Image != "nats:"+version+"-alpine" {
				t.Errorf("%s: image %q, want nats:%s-alpine (go.mod's nats-server)", name, s.Image, version)
			}
			if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0 {
				t.Errorf("%s: no health check", name)
			}
			args := append(append([]string{}, s.Entrypoint...), s.Command...)
			if got := flagValue(s.Command, "--name"); got != name {
				t.Errorf("%s: --name %q, want its service name (its routes' host name)", name, got)
			}
			script := strings.Join(args, " ")
			for _, part := range []string{"-c /etc/nats/nats-cluster.conf", "-sd /data", ". " + secretsDir + "/nats-server.env"} {
				if !strings.Contains(script, part) {
					t.Errorf("%s: entrypoint %q lacks %q", name, script, part)
				}
			}
			data, ok := mountAt(s, "/data")
			if !ok || data.Type != types.VolumeTypeVolume || dataVolumes[data.Source] {
				t.Errorf("%s: /data is %+v, want a named volume of its own", name, data)
			}
			dataVolumes[data.Source] = true
			for target, source := range map[string]string{
				"/etc/nats/nats-cluster.conf": "deploy/nats-cluster.conf",
				"/etc/nats/nats-auth.conf":    "deploy/nats-auth.conf",
			} {
				if v, ok := mountAt(s, target); !ok || !v.ReadOnly || !strings.HasSuffix(v.Source, source) {
					t.Errorf("%s: %s is %+v, want %s read-only", name, target, v, source)
				}
			}
			if v, ok := mountAt(s, secretsDir); !ok || !v.ReadOnly || v.Source != "secrets" {
				t.Errorf("%s: %s is %+v, want the secrets volume read-only", name, secretsDir, v)
			}
			if d, ok := s.DependsOn["keys"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("%s: does not wait for the keys", name)
			}
		}
	})

	t.Run("cluster configuration", func(t *testing.T) {
		opts := loadNATSConf(t)
		if !opts.JetStream {
			t.Error("JetStream is off")
		}
		if opts.Cluster.Name == "" || opts.Cluster.Port != 6222 {
			t.Errorf("cluster %q on port %d, want a name and 6222", opts.Cluster.Name, opts.Cluster.Port)
		}
		var hosts []string
		for _, r := range opts.Routes {
			if r.Port() != strconv.Itoa(opts.Cluster.Port) {
				t.Errorf("route %s: not the cluster port %d", r, opts.Cluster.Port)
			}
			hosts = append(hosts, r.Hostname())
		}
		sort.Strings(hosts)
		if !slices.Equal(hosts, natsNodes) {
			t.Errorf("routes to %v, want every node: %v", hosts, natsNodes)
		}
		if opts.Port != 4222 || opts.HTTPPort != 8222 {
			t.Errorf("client port %d, monitoring port %d: the compose file's URLs and health checks use 4222 and 8222",
				opts.Port, opts.HTTPPort)
		}
		var users []string
		for _, u := range opts.Nkeys {
			users = append(users, u.Nkey)
		}
		if len(users) != len(auth.DeployUsers(auth.DeployWorkers)) {
			t.Errorf("%d nkey users, want every user of the deployment (%d)", len(users), len(auth.DeployUsers(auth.DeployWorkers)))
		}
	})

	t.Run("sleipnir services", func(t *testing.T) {
		users := map[string]bool{}
		for _, u := range auth.DeployUsers(auth.DeployWorkers) {
			users[u.Name()] = true
		}
		for _, name := range sortedNames(p.Services) {
			s := p.Services[name]
			if s.Image != sleipnirImage || name == "keys" {
				continue
			}
			checkClusterClient(t, p, name, s, users)
		}
		// loadgen is a tool (`docker compose run --rm loadgen`), of the tools profile.
		checkClusterClient(t, p, "loadgen", p.DisabledServices["loadgen"], users)
	})

	t.Run("keys", func(t *testing.T) {
		s := p.Services["keys"]
		script := strings.Join(s.Command, " ")
		if got := flagValue(strings.Fields(script), "--workers"); got != strconv.Itoa(auth.DeployWorkers) {
			t.Errorf("keys makes %s workers' keys, the compose file runs %d", got, auth.DeployWorkers)
		}
		if v, ok := mountAt(s, secretsDir); !ok || v.ReadOnly || v.Source != "secrets" {
			t.Errorf("keys: %s is %+v, want the secrets volume writable", secretsDir, v)
		}
	})

	t.Run("workers", func(t *testing.T) {
		for _, name := range workerNames() {
			s := p.Services[name]
			id := strings.TrimPrefix(name, "worker-")
			if got := flagValue(s.Command, "--id"); got != id {
				t.Errorf("%s: --id %q, want %q (stable: its user may heartbeat as that id only)", name, got, id)
			}
			if s.Deploy == nil || s.Deploy.Resources.Limits == nil || s.Deploy.Resources.Limits.NanoCPUs <= 0 {
				t.Errorf("%s: no CPU limit", name)
			}
			if v, ok := mountAt(s, env(s, "SLEIPNIR_MODELS")); !ok || v.Source != "models" {
				t.Errorf("%s: SLEIPNIR_MODELS=%q is not the models volume", name, env(s, "SLEIPNIR_MODELS"))
			}
			if d, ok := s.DependsOn["models"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("%s: does not wait for the models", name)
			}
		}
	})

	t.Run("frontends", func(t *testing.T) {
		published := map[string]bool{}
		for _, name := range []string{"frontend-1", "frontend-2"} {
			s := p.Services[name]
			httpPort := portOf(t, flagValue(s.Command, "--http"))
			if len(s.Ports) != 1 || s.Ports[0].Target != uint32(httpPort) || published[s.Ports[0].Published] {
				t.Errorf("%s: ports %+v, want its --http port %d published on a host port of its own", name, s.Ports, httpPort)
			} else {
				published[s.Ports[0].Published] = true
			}
			checkHealthCheckPort(t, name, s, httpPort, "/v2/health/ready")
			if _, ok := s.DependsOn["planner"]; !ok {
				t.Errorf("%s: does not start after the planner", name)
			}
		}
	})

	t.Run("planner", func(t *testing.T) {
		s := p.Services["planner"]
		if got := flagValue(s.Command, "--replicas"); got != strconv.Itoa(len(natsNodes)) {
			t.Errorf("planner: --replicas %q, want %d (R3 on the three nodes)", got, len(natsNodes))
		}
		if got := flagValue(s.Command, "--pipeline"); got != examplesDir+"/traffic.yaml" {
			t.Errorf("planner: --pipeline %q, want .env's traffic", got)
		}
	})

	t.Run("observability", func(t *testing.T) {
		checkPrometheusTargets(t, p)
		g := p.Services["grafana"]
		if v, ok := mountAt(g, "/var/lib/grafana/dashboards/sleipnir.json"); !ok || !strings.HasSuffix(v.Source, "deploy/grafana/sleipnir.json") {
			t.Errorf("grafana: the dashboard deploy/grafana/sleipnir.json is not mounted: %+v", v)
		}
		var ds struct {
			Datasources []struct{ URL string } `yaml:"datasources"`
		}
		readYAML(t, "deploy/compose/grafana/datasources/prometheus.yml", &ds)
		if len(ds.Datasources) != 1 || hostOf(t, ds.Datasources[0].URL) != "prometheus" {
			t.Errorf("grafana's data source %+v is not the compose file's prometheus", ds.Datasources)
		}
		if _, ok := p.Services["jaeger"]; !ok {
			t.Error("no jaeger")
		}
	})

	t.Run("bind mounts exist", func(t *testing.T) {
		root, _ := filepath.Abs(repoRoot)
		for _, name := range sortedNames(p.Services) {
			for _, v := range p.Services[name].Volumes {
				if v.Type != types.VolumeTypeBind {
					continue
				}
				if _, err := os.Stat(v.Source); err != nil || !strings.HasPrefix(v.Source, root) {
					t.Errorf("%s: bind mount %s: not a path of the repository (%v)", name, v.Source, err)
				}
			}
		}
	})
}

// checkClusterClient checks a Sleipnir service of the cluster profile: every NATS node in its URLs, its own user's
// credentials, its metrics and traces, the pipelines mounted, and that it waits for the cluster and the keys.
func checkClusterClient(t *testing.T, p *types.Project, name string, s types.ServiceConfig, users map[string]bool) {
	t.Helper()
	var hosts []string
	for _, u := range strings.Split(env(s, "SLEIPNIR_NATS"), ",") {
		hosts = append(hosts, hostOf(t, u))
	}
	sort.Strings(hosts)
	if !slices.Equal(hosts, natsNodes) {
		t.Errorf("%s: SLEIPNIR_NATS names %v, want every node %v", name, hosts, natsNodes)
	}
	seed := flagValue(s.Command, "--nkey")
	if seed == "" {
		seed = env(s, "SLEIPNIR_NATS_NKEY")
	}
	user := strings.TrimSuffix(strings.TrimPrefix(seed, secretsDir+"/"), ".nk")
	switch {
	case name == "loadgen":
		if user != "client" {
			t.Errorf("loadgen: user %q, want client", user)
		}
		if got, want := env(s, "SLEIPNIR_INBOX_PREFIX"), wire.ClientInboxPrefix(user); got != want {
			t.Errorf("loadgen: inbox prefix %q, want its user's own (%s)", got, want)
		}
	case strings.HasPrefix(name, "frontend-"):
		if user != "frontend" {
			t.Errorf("%s: user %q, want frontend", name, user)
		}
	case user != name:
		t.Errorf("%s: user %q, want its own (%s)", name, user, name)
	}
	if !users[user] || seed != secretsDir+"/"+user+".nk" {
		t.Errorf("%s: seed %q is no user's of deploy/nats-auth.conf", name, seed)
	}
	if v, ok := mountAt(s, secretsDir); !ok || !v.ReadOnly || v.Source != "secrets" {
		t.Errorf("%s: %s is %+v, want the secrets volume read-only", name, secretsDir, v)
	}
	if name == "loadgen" {
		return
	}
	if v, ok := mountAt(s, examplesDir); name == "planner" && (!ok || !v.ReadOnly || !strings.HasSuffix(v.Source, "/examples")) {
		t.Errorf("%s: %s is %+v, want examples/ read-only", name, examplesDir, v)
	}
	for _, node := range natsNodes {
		if d, ok := s.DependsOn[node]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("%s: does not wait for %s to be healthy", name, node)
		}
	}
	if d, ok := s.DependsOn["keys"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
		t.Errorf("%s: does not wait for the keys", name)
	}
	if s.HealthCheck == nil || s.HealthCheck.Disable {
		t.Errorf("%s: no health check", name)
	}
	if !strings.HasPrefix(name, "frontend-") {
		checkHealthCheckPort(t, name, s, portOf(t, env(s, "SLEIPNIR_METRICS_ADDR")), "/metrics")
	}
	if _, ok := p.Services[hostOf(t, env(s, "OTEL_EXPORTER_OTLP_ENDPOINT"))]; !ok {
		t.Errorf("%s: traces go to %q, no service of the compose file", name, env(s, "OTEL_EXPORTER_OTLP_ENDPOINT"))
	}
}

// checkHealthCheckPort checks that a service's health check asks its own port for path with the image's
// sleipnir-healthcheck.
func checkHealthCheckPort(t *testing.T, name string, s types.ServiceConfig, port int, path string) {
	t.Helper()
	want := []string{"CMD", "sleipnir-healthcheck", strconv.Itoa(port), path}
	if s.HealthCheck == nil || !slices.Equal(s.HealthCheck.Test, want) {
		t.Errorf("%s: health check %v, want %v", name, s.HealthCheck, want)
	}
}

func TestComposeLaptopProfile(t *testing.T) {
	p := loadProject(t, map[string]string{"COMPOSE_PROFILES": "laptop"})
	want := []string{"grafana", "jaeger", "laptop", "models", "prometheus"}
	if got := sortedNames(p.Services); !slices.Equal(got, want) {
		t.Fatalf("services of the laptop profile:\n got %v\nwant %v", got, want)
	}
	s := p.Services["laptop"]
	if s.Command[0] != "up" || env(s, "SLEIPNIR_NATS") != "" {
		t.Errorf("laptop: %v with SLEIPNIR_NATS=%q, want `up` on its embedded server", s.Command, env(s, "SLEIPNIR_NATS"))
	}
	if !slices.Contains(s.Command, "--nats-auth") {
		t.Error("laptop: the embedded server runs without the deployment's permissions")
	}
	for _, port := range s.Ports {
		if port.HostIP != "127.0.0.1" {
			t.Errorf("laptop: port %s published beyond the laptop (%q)", port.Published, port.HostIP)
		}
	}
	checkHealthCheckPort(t, "laptop", s, portOf(t, flagValue(s.Command, "--http")), "/v2/health/ready")
	if v, ok := mountAt(s, flagValue(s.Command, "--models")); !ok || v.Source != "models" {
		t.Errorf("laptop: --models %q is not the models volume", flagValue(s.Command, "--models"))
	}
	if v, ok := mountAt(s, flagValue(s.Command, "--state-dir")); !ok || v.Type != types.VolumeTypeVolume {
		t.Errorf("laptop: --state-dir %q is not a volume", flagValue(s.Command, "--state-dir"))
	}
}

// TestComposePipelineVariable: SLEIPNIR_PIPELINE picks any pipeline of examples/, for the planner and the laptop.
func TestComposePipelineVariable(t *testing.T) {
	specs, err := filepath.Glob(filepath.Join(repoRoot, "examples", "*.yaml"))
	if err != nil || len(specs) == 0 {
		t.Fatalf("no pipelines in examples/: %v", err)
	}
	for _, spec := range specs {
		pipeline := strings.TrimSuffix(filepath.Base(spec), ".yaml")
		if strings.HasSuffix(pipeline, ".profile") {
			continue
		}
		for profile, service := range map[string]string{"cluster": "planner", "laptop": "laptop"} {
			p := loadProject(t, map[string]string{"SLEIPNIR_PIPELINE": pipeline, "COMPOSE_PROFILES": profile})
			s := p.Services[service]
			got := flagValue(s.Command, "--pipeline")
			rel, ok := strings.CutPrefix(got, examplesDir+"/")
			if !ok || rel != pipeline+".yaml" {
				t.Errorf("SLEIPNIR_PIPELINE=%s: %s's --pipeline is %q", pipeline, service, got)
				continue
			}
			v, _ := mountAt(s, examplesDir)
			if _, err := os.Stat(filepath.Join(v.Source, rel)); err != nil {
				t.Errorf("SLEIPNIR_PIPELINE=%s: %s does not see it: %v", pipeline, service, err)
			}
			if got := env(p.Services["models"], "SLEIPNIR_PIPELINE"); got != pipeline {
				t.Errorf("SLEIPNIR_PIPELINE=%s: the models job sees %q", pipeline, got)
			}
		}
	}
}
