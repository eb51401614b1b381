package frontend

import (
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/completion"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// part is the leaf report of the root's n-th child's item (det 0, cap 1 in pkg/hop/testdata/join.yaml).
func part(n int, status string) wire.ItemResult {
	task := []string{"det/d", "cap/c"}[n]
	return wire.ItemResult{ID: wire.ChildItemID(wire.RootItemID, n), Den: 2, Path: []string{"img/i", task},
		Status: status, Outputs: []wire.Tensor{wire.NewFP32("score", []int64{1}, []float32{float32(n)})}}
}

// TestJoinModes drives the join of pkg/hop/testdata/join.yaml with parts in turn, under each mode: what the tracker
// records at each step and what goes on to the merge task (its id, weight and inputs: the parts' outputs).
func TestJoinModes(t *testing.T) {
	text, err := os.ReadFile("../../pkg/hop/testdata/join.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		in             wire.ItemResult
		record, inputs int // leaves recorded by the step; inputs of the item sent on (-1: none sent)
	}
	ok, dropped := wire.ItemOK, wire.ItemDropped
	for _, tc := range []struct {
		name, mode string
		steps      []step
		late       int // leaves recorded when the join closes at the deadline
	}{
		{"all: sent with both", "mode: all", []step{{part(1, ok), 0, -1}, {part(1, ok), 0, -1}, {part(0, ok), 1, 2}}, 0},
		{"all: a branch dropped", "mode: all", []step{{part(0, ok), 0, -1}, {part(1, dropped), 2, -1}}, 0},
		{"all: a branch past the deadline", "mode: all", []step{{part(0, ok), 0, -1}}, 2},
		{"any: the first goes on", "mode: any", []step{{part(1, ok), 0, 1}, {part(0, ok), 1, -1}}, 0},
		{"any: a drop waits for the other", "mode: any", []step{{part(0, dropped), 1, -1}, {part(1, ok), 0, 1}}, 0},
		{"window: both in time", "mode: window, window_ms: 60000", []step{{part(0, ok), 0, -1}, {part(1, ok), 1, 2}}, 0},
		{"window: one, the other dropped", "mode: window, window_ms: 60000", []step{{part(0, ok), 0, -1}, {part(1, dropped), 1, 1}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := pipeline.Parse([]byte(strings.NewReplacer("CAP_MS", "5", "mode: all", tc.mode).Replace(string(text))))
			if err != nil {
				t.Fatal(err)
			}
			route := map[string][]plan.Route{"merge": {{Variant: "m", Prob: 1}}}
			p := &plan.Plan{Routing: plan.Routing{Downstream: map[string]map[string][]plan.Route{
				"det/d": route, "cap/c": route}}}
			f := &Frontend{rng: rand.New(rand.NewPCG(1, 2))}
			r := &request{id: "r", tracker: completion.New(), deadline: time.Now().Add(time.Minute)}
			for i, st := range tc.steps {
				record, sends := f.join(r, spec, p, st.in, nil, nil)
				f.recordLocked(r, record)
				if len(record) != st.record {
					t.Errorf("step %d: %d leaves recorded, want %d", i, len(record), st.record)
				}
				switch {
				case st.inputs < 0 && len(sends) > 0:
					t.Errorf("step %d: sent %+v, want nothing", i, sends)
				case st.inputs >= 0 && (len(sends) != 1 || len(sends[0].item.Inputs) != st.inputs ||
					sends[0].item.Den != 2 || sends[0].task != "merge" || sends[0].variant != "m"):
					t.Errorf("step %d: sent %+v, want one merge/m item of weight 1/2 with %d inputs", i, sends, st.inputs)
				}
			}
			before := len(r.tracker.Results())
			f.closeJoins(r)
			if got := len(r.tracker.Results()) - before; got != tc.late {
				t.Errorf("at the deadline %d leaves recorded, want %d", got, tc.late)
			}
			if f.joinParts.Load() != 0 {
				t.Errorf("%d parts still held", f.joinParts.Load())
			}
			if tc.late > 0 && (!r.tracker.Done() || r.tracker.Status(false) != wire.StatusPartial) {
				t.Errorf("closed at the deadline: done %v, %s; want partial", r.tracker.Done(), r.tracker.Status(false))
			}
		})
	}
}
