package sim

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/workload"
)

// TestServersDecideForThemselves: each server has its own deadline stage, built for one replica as a live worker
// builds its own, not one stage per variant deciding for all its replicas (the backups' token buckets then started
// differently live and simulated).
func TestServersDecideForThemselves(t *testing.T) {
	spec := traffic(t)
	s, err := newSim(Config{Spec: spec, Workload: workload.Constant(10, time.Second), Servers: 20, CommLatency: -1})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for i := range s.servers {
		sv := &s.servers[i]
		if sv.queue < 0 {
			continue
		}
		h := s.queues[sv.queue]
		p := h.pipe
		task := p.tasks[h.task]
		own := deadline.NewStage(spec, p.plan, p.system.Policy, task, h.variant.Name, h.budget, 1)
		if sv.table == nil || !reflect.DeepEqual(sv.table.Stage, own) {
			t.Fatalf("server %d (%s) has not the stage of one replica", i, h.name)
		}
		// A leaf task has no backups to share: its stages are the same for one replica and for all.
		if vp := p.plan.Find(task, h.variant.Name); vp.Replicas > 1 && !spec.IsLeaf(task) {
			all := deadline.NewStage(spec, p.plan, p.system.Policy, task, h.variant.Name, h.budget, vp.Replicas)
			if reflect.DeepEqual(sv.table.Stage, all) {
				t.Fatalf("%s: the stage of one replica is the stage of all %d; the test cannot tell them apart",
					h.name, vp.Replicas)
			}
			checked++
		}
		for j := range i {
			if s.servers[j].table != nil && s.servers[j].table.Stage == sv.table.Stage {
				t.Fatalf("servers %d and %d share a stage", j, i)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no variant with several replicas to check")
	}
}

// TestOneSequence: the planner service and the simulator drive the planning core (pkg/core) and call none of the
// estimators, control loops, tuner, blending or assignment functions it drives: the sequence is written once.
func TestOneSequence(t *testing.T) {
	forbidden := map[string][]string{
		"pkg/demand":  {"New", "NewFanoutEstimator", "NewTaskDemand", "NewCounters", "NewMessageSize"},
		"pkg/tuner":   {"New", "Observe", "WithLoans"},
		"pkg/control": {"New", "Resume"},
		"pkg/latency": {"NewBoard", "Blend"},
		"pkg/plan":    {"Assign"},
	}
	for _, dir := range []string{".", "../../services/planner"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			for _, use := range calls(t, f) {
				for _, name := range forbidden[use[0]] {
					if use[1] == name {
						t.Errorf("%s calls %s.%s: drive pkg/core instead", f, use[0], name)
					}
				}
			}
		}
	}
}

// calls are the package-level functions of this module's packages file refers to, as {"pkg/x", "Name"}.
func calls(t *testing.T, file string) [][2]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	const module = "github.com/sleipnir-serving/sleipnir/"
	imported := map[string]string{} // local name -> pkg/x
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !strings.HasPrefix(path, module) {
			continue
		}
		name := filepath.Base(path)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imported[name] = strings.TrimPrefix(path, module)
	}
	var out [][2]string
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && imported[id.Name] != "" {
				out = append(out, [2]string{imported[id.Name], sel.Sel.Name})
			}
		}
		return true
	})
	return out
}
