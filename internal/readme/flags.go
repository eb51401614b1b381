package readme

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// mainArgsEnv carries the arguments of a command's main to the test binary run as that command.
const mainArgsEnv = "SLEIPNIR_README_MAIN_ARGS"

// RunMain is the TestMain of a command's package: the test binary runs main on the arguments of Run's call when it
// is Run's child, and the package's tests otherwise.
func RunMain(m *testing.M, main func()) {
	if v, ok := os.LookupEnv(mainArgsEnv); ok {
		var args []string
		if err := json.Unmarshal([]byte(v), &args); err != nil {
			fmt.Fprintln(os.Stderr, mainArgsEnv+":", err)
			os.Exit(2)
		}
		os.Args = append([]string{os.Args[0]}, args...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Run runs the command's own main on args, in a child process of the test binary (whose TestMain is RunMain), and
// returns what it printed and how it exited.
func Run(t testing.TB, args []string) (string, error) {
	t.Helper()
	v, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(v))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A flag of the usage flag.PrintDefaults prints: "  -name" for a bool flag, "  -name type" for one with a value.
var usageFlag = regexp.MustCompile(`(?m)^  -([^\s=]+)(?: ([^\s]+))?`)

// CheckFlags checks a command's arguments with its program's own flag parsing. args[:words] name a subcommand (the
// program's usage must list flags for it); the rest must be flags and their values only, which the program must
// parse: it runs main on them with -h after them, which stops at the help and runs nothing, or fails on a flag it
// does not define or a value it refuses. No argument may be positional, for then the parsing would stop before -h.
func CheckFlags(t testing.TB, c Command, words int) {
	t.Helper()
	args := c.Args[1:]
	if len(args) < words {
		t.Errorf("%q: no subcommand", c.Line)
		return
	}
	usage, err := Run(t, append(append([]string{}, args[:words]...), "-h"))
	if err != nil {
		t.Errorf("%q: %s -h: %v\n%s", c.Line, strings.Join(args[:words], " "), err, firstLines(usage, 3))
		return
	}
	takesValue := map[string]bool{"h": false, "help": false}
	for _, m := range usageFlag.FindAllStringSubmatch(usage, -1) {
		takesValue[m[1]] = m[2] != ""
	}
	if len(takesValue) == 2 {
		t.Errorf("%q: no flags in its usage:\n%s", c.Line, firstLines(usage, 3))
		return
	}
	rest := args[words:]
	for i := 0; i < len(rest); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(rest[i], "-"), "=")
		value, known := takesValue[name]
		switch {
		case !strings.HasPrefix(rest[i], "-"):
			t.Errorf("%q: %q is positional: the README's commands give flags only", c.Line, rest[i])
			return
		case !known:
			t.Errorf("%q: %s defines no flag %q", c.Line, strings.Join(c.Args[:1+words], " "), rest[i])
			return
		case value && !hasValue && i+1 == len(rest):
			t.Errorf("%q: %s without its value", c.Line, rest[i])
			return
		case value && !hasValue:
			i++ // its value
		}
	}
	if out, err := Run(t, append(append([]string{}, args...), "-h")); err != nil {
		t.Errorf("%q: its flags do not parse: %v\n%s", c.Line, err, firstLines(out, 3))
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
