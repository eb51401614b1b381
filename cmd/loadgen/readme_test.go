package main

import (
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/readme"
)

// TestMain lets the README test run this binary's main (readme.Run).
func TestMain(m *testing.M) { readme.RunMain(m, main) }

// TestReadmeCommands: every bin/loadgen command of the README gives flags loadgen's own flag parsing takes.
func TestReadmeCommands(t *testing.T) {
	cmds, err := readme.Commands(readme.Read(t, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds = readme.Of(cmds, "bin/loadgen")
	if len(cmds) == 0 {
		t.Fatal("the README shows no bin/loadgen command")
	}
	for _, c := range cmds {
		readme.CheckFlags(t, c, 0)
	}
}
