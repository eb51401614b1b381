package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/readme"
)

// TestMain lets the README test run this binary's main (readme.Run).
func TestMain(m *testing.M) { readme.RunMain(m, main) }

// TestReadmeCommands: every bin/sleipnir command of the README names a subcommand and flags its own flag parsing
// takes (a subcommand that does not exist, a flag it does not define or a value it refuses fails).
func TestReadmeCommands(t *testing.T) {
	cmds := readme.Of(readme.Load(t), "bin/sleipnir")
	if len(cmds) == 0 {
		t.Fatal("the README shows no bin/sleipnir command")
	}
	for _, c := range cmds {
		switch c.Args[1] {
		case "--version", "version", "--help", "-h", "help":
			if out, err := readme.Run(t, c.Args[1:]); err != nil || out == "" {
				t.Errorf("%q: %v\n%s", c.Line, err, out)
			}
		default:
			readme.CheckFlags(t, c, 1)
		}
	}
}

// TestReadmeRequestsReachUp: the README's requests by hand go where `make run` (bin/sleipnir up) listens by default.
func TestReadmeRequestsReachUp(t *testing.T) {
	usage, err := readme.Run(t, []string{"up", "-h"})
	if err != nil {
		t.Fatalf("up -h: %v", err)
	}
	m := regexp.MustCompile(`(?m)^  -http string\n.*\(default "[^"]*:(\d+)"\)`).FindStringSubmatch(usage)
	if m == nil {
		t.Fatalf("up -h shows no default --http:\n%s", usage)
	}
	curls := readme.Of(readme.Load(t), "curl")
	if len(curls) == 0 {
		t.Fatal("the README shows no curl command")
	}
	for _, c := range curls {
		if !strings.Contains(c.Line, "localhost:"+m[1]+"/") {
			t.Errorf("%q: not up's default HTTP port %s", c.Line, m[1])
		}
	}
}
