// Package readme reads the shell commands the README (or a page of docs/) shows, for the tests that check each one
// against what the project runs: make targets, the binaries' flags, the requests, the compose commands. A command
// is a line of a fenced code block (continuation lines joined, comments dropped, split at `&&`, `;` and `|`), or an
// inline code span of two words or more whose program is one of Programs.
package readme

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Programs are the programs a README command may run, each with the test that checks its commands. A command of
// another program in a code block is an error (TestEveryCommandIsChecked), so that nothing shown goes unchecked.
var Programs = map[string]string{
	"make":            "internal/readme TestMakeCommands: make -n parses each target, each variable is the Makefile's",
	"go":              "internal/readme TestGoCommands: the packages exist",
	"bin/sleipnir":    "cmd/sleipnir TestReadmeCommands: the subcommand's own flag parsing",
	"bin/loadgen":     "cmd/loadgen TestReadmeCommands: loadgen's own flag parsing",
	"curl":            "services/up TestReadmeRequests: sent to a running system",
	"bin/nats":        "services/up TestReadmeRequests: sent to a running system",
	"bin/nats-server": "deploy TestReadmeNATSServerCommands: nats-server's own flag parsing",
	"docker compose":  "deploy TestReadmeDeploymentMatchesCompose: the compose file's services and ports",
}

// Command is one command as a page shows it.
type Command struct {
	Line string            // as shown, continuation lines joined, without its comment
	Env  map[string]string // the VAR=value words before the program
	Args []string          // the program and its arguments, split as the shell splits them
}

// Program is the command's program: its first word, or "docker compose".
func (c Command) Program() string {
	if len(c.Args) >= 2 && c.Args[0] == "docker" && c.Args[1] == "compose" {
		return "docker compose"
	}
	if len(c.Args) == 0 {
		return ""
	}
	return c.Args[0]
}

// Root is the module's root directory: the nearest parent of the working directory with a go.mod.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Read is the text of a file of the module, by its path from the root ("README.md", "docs/deploy.md").
func Read(t testing.TB, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Section is the part of text under heading (a whole line, "## Deploying"), up to the next heading of the same
// level or above outside a code block.
func Section(text, heading string) (string, bool) {
	_, rest, ok := strings.Cut("\n"+text, "\n"+heading+"\n")
	if !ok {
		return "", false
	}
	level := strings.Index(heading, " ")
	var out strings.Builder
	fenced := false
	for _, l := range strings.SplitAfter(rest, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if n := strings.Index(l, " "); !fenced && n > 0 && n <= level && strings.Trim(l[:n], "#") == "" {
			break
		}
		out.WriteString(l)
	}
	return out.String(), true
}

// Load is the README's commands (Commands of README.md).
func Load(t testing.TB) []Command {
	t.Helper()
	cmds, err := Commands(Read(t, "README.md"))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	return cmds
}

// Commands are the commands of text: every line of its fenced code blocks, and its inline code spans that run one of
// Programs.
func Commands(text string) ([]Command, error) {
	var cmds []Command
	var prose strings.Builder
	in, cont := false, ""
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			continue
		}
		if !in {
			prose.WriteString(l + "\n")
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cont += s
			continue
		}
		line := cont + l
		cont = ""
		parsed, err := parseLine(line)
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, parsed...)
	}
	// A span may wrap over a line of the page.
	spans := regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(strings.ReplaceAll(prose.String(), "\n", " "), -1)
	for _, m := range spans {
		parsed, err := parseLine(m[1])
		if err != nil || len(parsed) != 1 || len(parsed[0].Args) < 2 {
			continue // prose, not a command
		}
		if _, ok := Programs[parsed[0].Program()]; ok {
			cmds = append(cmds, parsed[0])
		}
	}
	return cmds, nil
}

// Of are the commands of program.
func Of(cmds []Command, program string) []Command {
	var of []Command
	for _, c := range cmds {
		if c.Program() == program {
			of = append(of, c)
		}
	}
	return of
}

// parseLine splits a shell line into its commands, at `&&`, `;` and `|` outside quotes, each split into words with
// its leading VAR=value words apart; a comment ends the line.
func parseLine(line string) ([]Command, error) {
	var cmds []Command
	var words []string
	var word strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, word.String())
		}
		word.Reset()
		inWord = false
	}
	end := func(text string) {
		flush()
		if c := newCommand(strings.TrimSpace(text), words); len(c.Args) > 0 {
			cmds = append(cmds, c)
		}
		words = nil
	}
	start := 0
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == '\'' || ch == '"':
			j := strings.IndexByte(line[i+1:], ch)
			if j < 0 {
				return nil, fmt.Errorf("%q: unclosed quote", line)
			}
			word.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case ch == '\\' && i+1 < len(line):
			word.WriteByte(line[i+1])
			inWord = true
			i++
		case ch == '#' && !inWord:
			end(line[start:i])
			return cmds, nil
		case ch == ';' || ch == '|' || (ch == '&' && strings.HasPrefix(line[i:], "&&")):
			end(line[start:i])
			if ch == '&' || strings.HasPrefix(line[i:], "||") {
				i++
			}
			start = i + 1
		case ch == ' ' || ch == '\t':
			flush()
		default:
			word.WriteByte(ch)
			inWord = true
		}
	}
	end(line[start:])
	return cmds, nil
}

var envWord = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)

func newCommand(line string, words []string) Command {
	c := Command{Line: line, Env: map[string]string{}}
	for len(words) > 0 && envWord.MatchString(words[0]) {
		k, v, _ := strings.Cut(words[0], "=")
		c.Env[k] = v
		words = words[1:]
	}
	c.Args = words
	return c
}
