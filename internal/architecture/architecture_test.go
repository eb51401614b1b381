package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/internal/readme"
)

const module = "github.com/sleipnir-serving/sleipnir/"

// A layer is a group of packages. A package may import packages of lower ranks, and of its own layer when the layer
// says so; docs/architecture.md draws them.
type layer struct {
	name     string
	rank     int
	packages []string // module-relative; a trailing "/" takes a folder's packages
	// ownImports allows imports between the layer's packages.
	ownImports bool
	// pure layers import none of forbiddenInPure, and call no global random function (pureRandom).
	pure bool
}

var layers = []layer{
	{name: "formats", rank: 0, ownImports: true, pure: true, packages: []string{"pkg/wire", "pkg/variate", "pkg/milp",
		"pkg/plot", "pkg/ratelog", "pkg/buildinfo", "pkg/onnx", "schemas"}},
	{name: "model", rank: 1, ownImports: true, pure: true, packages: []string{"pkg/pipeline", "pkg/plan", "pkg/ocr",
		"pkg/workload"}},
	{name: "policy", rank: 2, ownImports: true, pure: true, packages: []string{"pkg/allocate", "pkg/control",
		"pkg/core", "pkg/deadline", "pkg/demand", "pkg/latency", "pkg/routing", "pkg/tuner", "pkg/batching",
		"pkg/hop", "pkg/completion", "pkg/admission", "pkg/gears",
		"pkg/ramsis"}},
	{name: "execution", rank: 2, ownImports: true, pure: true, packages: []string{"pkg/executor", "pkg/executor/"}},
	{name: "simulator", rank: 3, pure: true, packages: []string{"pkg/sim"}},
	{name: "plumbing", rank: 3, ownImports: true, packages: []string{"pkg/bus", "pkg/catalog", "pkg/auth",
		"pkg/metrics", "pkg/telemetry"}},
	{name: "services", rank: 4, packages: []string{"services/planner", "services/frontend", "services/worker"}},
	{name: "composition", rank: 5, packages: []string{"services/up"}},
	{name: "commands and tools", rank: 6, ownImports: true, packages: []string{"cmd/", "tools/", "deploy"}},
	{name: "test helpers", rank: 6, ownImports: true, packages: []string{"internal/"}},
}

// forbiddenInPure are the imports (prefixes) a pure layer does without: the network, the data plane and the
// telemetry belong to the services that call the policies.
var forbiddenInPure = []string{"github.com/nats-io/", "net/http", "github.com/prometheus/", "go.opentelemetry.io/",
	module + "internal/"}

// pureRandom are the functions of math/rand and math/rand/v2 a pure package may call: those that make a generator
// from a seed it was given. The others draw from the process's global source, which a run cannot replay.
var pureRandom = map[string]bool{"New": true, "NewPCG": true, "NewSource": true, "NewChaCha8": true, "NewZipf": true}

func (l layer) holds(pkg string) bool {
	for _, p := range l.packages {
		if p == pkg || strings.HasSuffix(p, "/") && strings.HasPrefix(pkg, p) {
			return true
		}
	}
	return false
}

func layerOf(pkg string) (layer, bool) {
	for _, l := range layers {
		if l.holds(pkg) {
			return l, true
		}
	}
	return layer{}, false
}

// source is what a package's non-test files import, and the global random functions they call.
type source struct {
	imports map[string][]string // import path -> files
	random  []string            // "file: rand.X"
}

// readModule parses every package of the module from its root, without the test files (tests may import what they
// need: helpers, other services).
func readModule(t *testing.T, root string) map[string]*source {
	t.Helper()
	pkgs := map[string]*source{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" ||
				name == "models" || name == "bin" || name == "data" || name == "state") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		src := pkgs[rel]
		if src == nil {
			src = &source{imports: map[string][]string{}}
			pkgs[rel] = src
		}
		randName := ""
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			src.imports[p] = append(src.imports[p], filepath.Base(path))
			if p == "math/rand" || p == "math/rand/v2" {
				randName = "rand"
				if imp.Name != nil {
					randName = imp.Name.Name
				}
			}
		}
		if randName != "" {
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == randName && !pureRandom[sel.Sel.Name] &&
					token.IsExported(sel.Sel.Name) && !isRandType(sel.Sel.Name) {
					src.random = append(src.random, filepath.Base(path)+": "+randName+"."+sel.Sel.Name)
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// isRandType: the package's types (a *rand.Rand passed in is how a pure package draws).
func isRandType(name string) bool {
	switch name {
	case "Rand", "Source", "PCG", "ChaCha8", "Zipf":
		return true
	}
	return false
}

// TestLayers: every package is in a layer of docs/architecture.md, and keeps its rules.
func TestLayers(t *testing.T) {
	pkgs := readModule(t, readme.Root(t))
	if len(pkgs) < 20 {
		t.Fatalf("read %d packages: the walk missed the module", len(pkgs))
	}
	names := make([]string, 0, len(pkgs))
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, pkg := range names {
		src := pkgs[pkg]
		from, ok := layerOf(pkg)
		if !ok {
			t.Errorf("%s is in no layer: place it in docs/architecture.md and in this test's layers", pkg)
			continue
		}
		for imp, files := range src.imports {
			if from.pure {
				for _, bad := range forbiddenInPure {
					if strings.HasPrefix(imp, bad) {
						t.Errorf("%s (%s, pure) imports %s (%s)", pkg, from.name, imp, strings.Join(files, ", "))
					}
				}
			}
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if err := allowed(from, pkg, dep); err != "" {
				t.Errorf("%s (%s) imports %s: %s (%s)", pkg, from.name, dep, err, strings.Join(files, ", "))
			}
		}
		if from.pure {
			for _, r := range src.random {
				t.Errorf("%s (%s, pure) draws from the global random source: %s; take a *rand.Rand or a seed", pkg,
					from.name, r)
			}
		}
	}
}

// allowed says why pkg, of layer from, may not import dep ("" when it may).
func allowed(from layer, pkg, dep string) string {
	to, ok := layerOf(dep)
	if !ok {
		return "a package in no layer"
	}
	switch {
	case to.name == "test helpers":
		if from.name != "commands and tools" && from.name != "test helpers" {
			return "a test helper, for tests, commands and tools only"
		}
	case to.rank > from.rank:
		return "a higher layer (" + to.name + ")"
	case to.rank == from.rank && to.name != from.name:
		return "a layer beside its own (" + to.name + ")"
	case to.name == from.name && !from.ownImports && dep != pkg:
		return "another package of its layer, which keeps them apart"
	}
	return ""
}

// TestLayersCatchABadImport: the rules refuse the imports the layers forbid (the test above would pass on a
// module that kept none of them if allowed said yes to all).
func TestLayersCatchABadImport(t *testing.T) {
	cases := []struct {
		pkg, dep string
		ok       bool
	}{
		{"pkg/allocate", "pkg/milp", true},
		{"services/planner", "pkg/core", true},
		{"services/up", "services/worker", true},
		{"pkg/plan", "pkg/allocate", false},            // a model importing a policy
		{"pkg/sim", "pkg/bus", false},                  // the simulator importing the data plane
		{"services/worker", "services/planner", false}, // a service importing another
		{"pkg/core", "internal/testrig", false},        // production code importing a test helper
		{"tools/chaos", "internal/natsproc", true},
		{"pkg/wire", "pkg/pipeline", false},
	}
	for _, c := range cases {
		from, _ := layerOf(c.pkg)
		if got := allowed(from, c.pkg, c.dep) == ""; got != c.ok {
			t.Errorf("%s importing %s: allowed %v, want %v", c.pkg, c.dep, got, c.ok)
		}
	}
}
