package readme

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func TestCommands(t *testing.T) {
	text := "prose `make run PIPELINE=ocr` and `--flag` and `make`\n" +
		"```sh\n" +
		"make run     # a comment\n" +
		"             # its second line\n" +
		"curl -s localhost:8080/v2 -H 'Content-Type: application/json' \\\n" +
		"  -d '{\"a\": \"#1\"}'\n" +
		"set -a; A=1 B=\"x y\" bin/loadgen --qps 1 && bin/nats req s | head\n" +
		"```\n" +
		"`COMPOSE_PROFILES=laptop docker compose up -d`, wrapped: `bin/sleipnir\nplan --servers 3`\n"
	cmds, err := Commands(text)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, c := range cmds {
		got = append(got, append([]string{c.Program()}, c.Args...))
	}
	want := [][]string{
		{"make", "make", "run"},
		{"curl", "curl", "-s", "localhost:8080/v2", "-H", "Content-Type: application/json", "-d", `{"a": "#1"}`},
		{"set", "set", "-a"},
		{"bin/loadgen", "bin/loadgen", "--qps", "1"},
		{"bin/nats", "bin/nats", "req", "s"},
		{"head", "head"},
		{"make", "make", "run", "PIPELINE=ocr"},
		{"docker compose", "docker", "compose", "up", "-d"},
		{"bin/sleipnir", "bin/sleipnir", "plan", "--servers", "3"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("commands:\n got %q\nwant %q", got, want)
	}
	if env := cmds[3].Env; env["A"] != "1" || env["B"] != "x y" {
		t.Errorf("env of %q: %v", cmds[3].Line, env)
	}
	if _, err := Commands("```\ncurl -d '{\n```\n"); err == nil {
		t.Error("an unclosed quote parsed")
	}
}

func TestSection(t *testing.T) {
	text := "# T\n## A\na\n### A.1\n```sh\n# not a heading\n```\n## B\nb\n"
	if s, ok := Section(text, "## A"); !ok || s != "a\n### A.1\n```sh\n# not a heading\n```\n" {
		t.Errorf("## A: %q, %v", s, ok)
	}
	if s, ok := Section(text, "### A.1"); !ok || s != "```sh\n# not a heading\n```\n" {
		t.Errorf("### A.1: %q, %v", s, ok)
	}
	if _, ok := Section(text, "## C"); ok {
		t.Error("## C found")
	}
}

// TestReadmeIsAGuide: the README stays a user guide; measurements, references and design go to docs/.
func TestReadmeIsAGuide(t *testing.T) {
	if n := strings.Count(Read(t, "README.md"), "\n"); n >= 200 {
		t.Errorf("README.md has %d lines: a user guide stays under 200 (move the rest to docs/)", n)
	}
}

// TestEveryCommandIsChecked: every command the README shows runs a program whose commands a test checks.
func TestEveryCommandIsChecked(t *testing.T) {
	for _, c := range Load(t) {
		if _, ok := Programs[c.Program()]; !ok {
			t.Errorf("README command %q: no test checks %s's commands (readme.Programs)", c.Line, c.Program())
		}
	}
}

// TestMakeCommands: each make command of the README is one make parses (make -n: its targets exist), and each
// variable it sets is one the Makefile uses.
func TestMakeCommands(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root := Root(t)
	makefile := Read(t, "Makefile")
	cmds := Of(Load(t), "make")
	if len(cmds) < 2 {
		t.Fatalf("the README shows %d make commands; want make run and make test at least", len(cmds))
	}
	for _, c := range cmds {
		for _, a := range c.Args[1:] {
			k, v, ok := strings.Cut(a, "=")
			if !ok {
				continue
			}
			if !regexp.MustCompile(`\$[({]` + regexp.QuoteMeta(k) + `[)}]`).MatchString(makefile) {
				t.Errorf("%q: the Makefile does not use %s", c.Line, k)
			}
			if _, err := os.Stat(filepath.Join(root, "examples", v+".yaml")); k == "PIPELINE" && err != nil {
				t.Errorf("%q: no pipeline %s in examples/", c.Line, v)
			}
		}
		cmd := exec.Command("make", append([]string{"-n", "-C", root, "--no-print-directory"}, c.Args[1:]...)...)
		cmd.Env = append(os.Environ(), "MAKEFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%q: make -n: %v\n%s", c.Line, err, lastLines(string(out), 5))
		}
	}
}

// TestGoCommands: the README's go commands test packages that exist.
func TestGoCommands(t *testing.T) {
	root := Root(t)
	for _, c := range Of(Load(t), "go") {
		if c.Args[1] != "test" {
			t.Errorf("%q: go %s is not checked here", c.Line, c.Args[1])
			continue
		}
		for _, p := range c.Args[2:] {
			if strings.HasPrefix(p, "-") {
				t.Errorf("%q: flags are not checked here", c.Line)
				continue
			}
			if dir, ok := strings.CutSuffix(p, "/..."); ok {
				if st, err := os.Stat(filepath.Join(root, dir)); err != nil || !st.IsDir() {
					t.Errorf("%q: no directory %s", c.Line, dir)
				}
			} else if m, _ := filepath.Glob(filepath.Join(root, p, "*_test.go")); len(m) == 0 {
				t.Errorf("%q: %s holds no tests", c.Line, p)
			}
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
