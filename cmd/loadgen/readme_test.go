package main

import (
	"slices"
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/readme"
)

// TestMain lets the README test run this binary's main (readme.Run).
func TestMain(m *testing.M) { readme.RunMain(m, main) }

// TestReadmeCommands: every bin/loadgen command of the README (and `docker compose run loadgen`'s) gives flags loadgen's own flag parsing takes.
func TestReadmeCommands(t *testing.T) {
	cmds := readme.Load(t)
	loadgen := readme.Of(cmds, "bin/loadgen")
	if len(loadgen) == 0 {
		t.Fatal("the README shows no bin/loadgen command")
	}
	// `docker compose run --rm loadgen FLAGS` runs the image's loadgen on them.
	for _, c := range readme.Of(cmds, "docker compose") {
		if i := slices.Index(c.Args, "loadgen"); i > 0 && c.Args[2] == "run" {
			loadgen = append(loadgen, readme.Command{Line: c.Line, Args: append([]string{"loadgen"}, c.Args[i+1:]...)})
		}
	}
	for _, c := range loadgen {
		readme.CheckFlags(t, c, 0)
	}
}
