package main

import (
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
