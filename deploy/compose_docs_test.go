package deploy_test

import (
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sleipnir-serving/sleipnir/internal/readme"
)

// TestDeployDocMatchesCompose checks docs/deploy.md's walk-through against the compose file: every `docker compose`
// command names services of the profile it runs, and the URLs it shows are the ports the compose file publishes, all
// of them.
func TestDeployDocMatchesCompose(t *testing.T) {
	shown := checkComposeSection(t, "docs/deploy.md", "### Running it", 3)
	for port, name := range publishedPorts(t) {
		if !shown[port] {
			t.Errorf("docs/deploy.md's walk-through does not show %s's published port %s", name, port)
		}
	}
}

// TestReadmeDeploymentMatchesCompose: the README's deployment section runs compose commands of the compose file's
// profiles and shows ports it publishes.
func TestReadmeDeploymentMatchesCompose(t *testing.T) {
	checkComposeSection(t, "README.md", "## Deploying", 2)
}

// TestReadmeNATSServerCommands: the README's nats-server commands are ones nats-server's own flag parsing takes.
func TestReadmeNATSServerCommands(t *testing.T) {
	cmds := readme.Load(t)
	for _, c := range readme.Of(cmds, "bin/nats-server") {
		fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		noop := func() {}
		if _, err := server.ConfigureOptions(fs, c.Args[1:], noop, noop, noop); err != nil {
			t.Errorf("%q: %v", c.Line, err)
		} else if fs.NArg() > 0 {
			t.Errorf("%q: nats-server takes no arguments %q", c.Line, fs.Args())
		}
	}
}

// publishedPorts are the host ports the compose file publishes in any profile, each with its service.
func publishedPorts(t *testing.T) map[string]string {
	published := map[string]string{}
	for _, profile := range []string{"cluster", "laptop"} {
		p := loadProject(t, map[string]string{"COMPOSE_PROFILES": profile})
		for _, name := range sortedNames(p.Services) {
			for _, port := range p.Services[name].Ports {
				published[port.Published] = name
			}
		}
	}
	return published
}

// checkComposeSection checks the `docker compose` commands of a page's section (at least want of them) against the
// compose file, and that every local port it shows is published; it returns the ports shown.
func checkComposeSection(t *testing.T, page, heading string, want int) map[string]bool {
	t.Helper()
	section, ok := readme.Section(readme.Read(t, page), heading)
	if !ok {
		t.Fatalf("%s has no %q", page, heading)
	}
	published := publishedPorts(t)
	shown := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?:localhost|127\.0\.0\.1):(\d+)`).FindAllStringSubmatch(section, -1) {
		shown[m[1]] = true
		if _, ok := published[m[1]]; !ok {
			t.Errorf("%s %q shows port %s, which no service of docker-compose.yml publishes", page, heading, m[1])
		}
	}
	cmds, err := readme.Commands(section)
	if err != nil {
		t.Fatal(err)
	}
	cmds = readme.Of(cmds, "docker compose")
	for _, c := range cmds {
		checkComposeCommand(t, c)
	}
	if len(cmds) < want {
		t.Errorf("%s %q shows %d docker compose commands; want %d at least", page, heading, len(cmds), want)
	}
	return shown
}

// checkComposeCommand loads the project with the command's environment prefix (VAR=value ...) and checks that the
// services it names exist in it.
func checkComposeCommand(t *testing.T, c readme.Command) {
	t.Helper()
	line := c.Line
	p := loadProject(t, c.Env)
	args := c.Args[2:]
	var sub string
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--profile" && i+1 < len(args) {
			t.Errorf("%q: use COMPOSE_PROFILES, as the compose file's comments do", line)
			i++
			continue
		}
		if sub == "" {
			sub = a
			continue
		}
		rest = append(rest, a)
	}
	switch sub {
	case "up", "down", "ps", "logs", "build", "pull", "config":
		for _, a := range rest {
			if strings.HasPrefix(a, "-") {
				continue
			}
			if _, ok := p.Services[a]; !ok {
				t.Errorf("%q: no service %q in the %v profile", line, a, p.Profiles)
			}
		}
	case "run", "exec", "stop", "start", "restart", "kill":
		// The first word that is not a flag is the service; what follows is its command.
		for _, a := range rest {
			if strings.HasPrefix(a, "-") {
				continue
			}
			_, enabled := p.Services[a]
			_, disabled := p.DisabledServices[a]
			if !enabled && !(sub == "run" && disabled) {
				t.Errorf("%q: no service %q in the %v profile", line, a, p.Profiles)
			}
			return
		}
		t.Errorf("%q: names no service", line)
	default:
		t.Errorf("%q: a docker compose command the test does not know (%q)", line, sub)
	}
}
