package deploy_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
)

// TestFetchModelsMatchesMakefile: the compose file's models job fetches what `make models` does.
func TestFetchModelsMatchesMakefile(t *testing.T) {
	mk := readFile(t, "Makefile")
	script := readFile(t, "deploy/compose/fetch-models.sh")
	for _, v := range []string{"ORT_NPM", "OCR_NPM", "OCR_MODELS"} {
		inMake := regexp.MustCompile(`(?m)^` + v + `\s*\??=\s*(.+)$`).FindStringSubmatch(mk)
		inScript := regexp.MustCompile(`(?m)^` + v + `="?([^"\n]+)"?$`).FindStringSubmatch(script)
		if inMake == nil || inScript == nil || strings.TrimSpace(inMake[1]) != inScript[1] {
			t.Errorf("%s: Makefile %q, deploy/compose/fetch-models.sh %q", v, inMake, inScript)
		}
	}
}

// loadNATSConf parses deploy/nats-cluster.conf as a node does, with public keys in the environment as the keys job
// writes them.
func loadNATSConf(t *testing.T) *server.Options {
	t.Helper()
	for _, u := range auth.DeployUsers(auth.DeployWorkers) {
		pub, _, err := auth.NewNkey()
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(u.NkeyVar(), pub)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(repoRoot, "deploy", "nats-cluster.conf"))
	if err != nil {
		t.Fatalf("deploy/nats-cluster.conf: %v", err)
	}
	return opts
}

// checkPrometheusTargets: Prometheus scrapes every service that serves metrics, at its metrics port.
func checkPrometheusTargets(t *testing.T, p *types.Project) {
	t.Helper()
	prom := p.Services["prometheus"]
	v, ok := mountAt(prom, "/etc/prometheus/prometheus.yml")
	if !ok {
		t.Fatal("prometheus: no configuration mounted")
	}
	var conf struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
			DNSSDConfigs  []struct {
				Names []string
				Type  string
				Port  int
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	rel, _ := filepath.Rel(mustAbs(t, repoRoot), v.Source)
	readYAML(t, rel, &conf)
	targets := map[string]bool{}
	for _, sc := range conf.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				targets[target] = true
			}
		}
		for _, dns := range sc.DNSSDConfigs {
			if dns.Type != "A" {
				t.Errorf("prometheus: DNS discovery of type %q, want A (Docker's DNS answers A records)", dns.Type)
			}
			for _, name := range dns.Names {
				targets[fmt.Sprintf("%s:%d", name, dns.Port)] = true
			}
		}
	}
	for _, profile := range []string{"cluster", "laptop"} {
		pp := loadProject(t, map[string]string{"COMPOSE_PROFILES": profile})
		for _, name := range sortedNames(pp.Services) {
			s := pp.Services[name]
			addr := env(s, "SLEIPNIR_METRICS_ADDR")
			if a := flagValue(s.Command, "--metrics-addr"); a != "" {
				addr = a
			}
			if addr == "" || s.Image != sleipnirImage {
				continue
			}
			if target := fmt.Sprintf("%s:%d", name, portOf(t, addr)); !targets[target] {
				t.Errorf("prometheus does not scrape %s", target)
			}
		}
	}
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readYAML(t *testing.T, rel string, v any) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(readFile(t, rel)), v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// hostOf is the host of a URL ("nats://nats-1:4222").
func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Hostname() == "" {
		t.Errorf("%q: not a URL with a host (%v)", raw, err)
		return ""
	}
	return u.Hostname()
}

// portOf is the port of a listen address (":9464", "0.0.0.0:8080").
func portOf(t *testing.T, addr string) int {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	port, err := strconv.Atoi(addr[i+1:])
	if i < 0 || err != nil {
		t.Errorf("%q: not an address with a port", addr)
	}
	return port
}

// TestImageScriptMakesComposeImages: deploy/images/build.sh makes every image the cluster profile runs but Sleipnir's
// own (built from deploy/Dockerfile, whose stages' images it makes too) and Grafana's, which the offline override
// leaves out: with it, the compose file runs on an engine that has only those.
func TestImageScriptMakesComposeImages(t *testing.T) {
	made := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^[A-Z_]+=([a-z0-9./_-]+:[a-z0-9._-]+)$`).FindAllStringSubmatch(readFile(t, "deploy/images/build.sh"), -1) {
		made[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllStringSubmatch(readFile(t, "deploy/Dockerfile"), -1) {
		if !made[m[1]] {
			t.Errorf("deploy/Dockerfile's FROM %s: not made by deploy/images/build.sh", m[1])
		}
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(repoRoot, composeFile), filepath.Join(repoRoot, "deploy/compose/offline.yml")},
		cli.WithWorkingDirectory(repoRoot), cli.WithEnv([]string{"SLEIPNIR_NPM_CACHE=/tmp"}), cli.WithDotEnv, cli.WithDefaultProfiles())
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml with deploy/compose/offline.yml: %v", err)
	}
	if _, ok := p.Services["grafana"]; ok {
		t.Error("the offline override leaves grafana in the cluster profile")
	}
	for _, name := range sortedNames(p.Services) {
		if image := p.Services[name].Image; image != sleipnirImage && !made[image] {
			t.Errorf("service %s runs %s: not made by deploy/images/build.sh", name, image)
		}
	}
	if len(made) < 6 {
		t.Errorf("deploy/images/build.sh names %d images: %v", len(made), made)
	}
}
