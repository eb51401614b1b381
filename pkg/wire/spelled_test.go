package wire

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// wirePrefixes start the names this package makes: a string literal that starts with one spells a subject, KV key,
// KV subject or stream, inbox or header by hand.
var wirePrefixes = []string{
	InferPrefix, TaskPrefix, ResultPrefix, DemandPrefix, StatusPrefix, DeadLetterPrefix, // subjects
	SpecKeys.Key(""), PlanKeys.Key(""), AssignKeys.Key(""), WorkerKeys.Key(""), // KV keys
	"$KV.", "KV_", // KVSubject and KVStream, also when the bucket's name is added to them
	InboxPrefix(""), ClientInboxPrefix(""),
	"Sleipnir-", // headers, including ones not yet named here
}

// wireNames are spelled whole: the headers (of any case: NATS and HTTP headers are matched so) and the task stream
// prefix. The bucket name, "sleipnir", and the frontends' queue group, "sleipnir-frontend", are left out: the same
// words name the program, the embedded server and connections.
var wireNames = []string{
	HeaderRequestID, HeaderDeadline, HeaderTimeout, HeaderPath, HeaderReplyTo, HeaderContentType, HeaderError,
	HeaderMsgID, HeaderTraceParent, HeaderTraceID, HeaderRetryAfter, HeaderInferenceHeaderLength, HeaderServiceError,
	HeaderServiceErrorCode, TaskStream(""), DeadLetterStream,
}

// handSpelled says which wire name a string literal's value spells by hand, if any.
func handSpelled(s string) (string, bool) {
	for _, p := range wirePrefixes {
		if strings.HasPrefix(s, p) {
			return p, true
		}
	}
	for _, n := range wireNames {
		if strings.EqualFold(s, n) {
			return n, true
		}
	}
	return "", false
}

func TestHandSpelled(t *testing.T) {
	for _, s := range []string{"spec.*", "plan.", "assign.%s", "worker.w1", "sleipnir.task.p.t.v", "$KV.", "KV_",
		"Sleipnir-Deadline", "content-type", "Nats-Msg-Id", "SLEIPNIR_", "_SLEIPNIR.frontend",
		"_INBOX.client"} {
		if _, bad := handSpelled(s); !bad {
			t.Errorf("%q is not caught", s)
		}
	}
	for _, s := range []string{"sleipnir", "sleipnir.request_id", "SLEIPNIR_MODELS", "specs", "worker", "planner"} {
		if n, bad := handSpelled(s); bad {
			t.Errorf("%q is taken for %q", s, n)
		}
	}
}

// No Go source outside this package spells a subject, KV key, stream or header by hand: they use this package's
// names, so that schemas/README.md, which documents them, describes what the code does. Tests are left out (they
// may send what the code would never build) and so are fuzz corpora (not Go).
func TestWireNamesAreSpelledOnlyHere(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == here || path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if name, bad := handSpelled(s); bad {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d: %s spells %q by hand; use pkg/wire's name", rel, fset.Position(lit.Pos()).Line,
					lit.Value, name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d Go files under %s; is it the module?", files, root)
	}
}

// moduleRoot is the nearest directory above the working directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := filepath.Abs(".")
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
