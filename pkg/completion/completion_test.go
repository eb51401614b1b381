package completion

import (
	"math/rand/v2"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func leaf(id string, den uint64, status string) wire.ItemResult {
	return wire.ItemResult{ID: id, Den: den, Status: status}
}

func TestTracker(t *testing.T) {
	tests := []struct {
		name    string
		reports []wire.ItemResult
		// wantDone after each report
		wantDone   []bool
		wantStatus string
	}{
		{"single root leaf", []wire.ItemResult{leaf("0", 1, wire.ItemOK)}, []bool{true}, wire.StatusOK},
		{"fan-out of 3, out of order",
			[]wire.ItemResult{leaf("0.2", 3, wire.ItemOK), leaf("0.0", 3, wire.ItemOK), leaf("0.1", 3, wire.ItemOK)},
			[]bool{false, false, true}, wire.StatusOK},
		{"uneven tree: 0 -> {0.0 -> 3 leaves, 0.1 leaf}",
			[]wire.ItemResult{leaf("0.0.1", 6, wire.ItemOK), leaf("0.1", 2, wire.ItemOK), leaf("0.0.0", 6, wire.ItemOK), leaf("0.0.2", 6, wire.ItemOK)},
			[]bool{false, false, false, true}, wire.StatusOK},
		{"duplicate counted once",
			[]wire.ItemResult{leaf("0.0", 2, wire.ItemOK), leaf("0.0", 2, wire.ItemOK), leaf("0.1", 2, wire.ItemOK)},
			[]bool{false, false, true}, wire.StatusOK},
		{"some dropped is partial",
			[]wire.ItemResult{leaf("0.0", 2, wire.ItemDropped), leaf("0.1", 2, wire.ItemOK)},
			[]bool{false, true}, wire.StatusPartial},
		{"all dropped", []wire.ItemResult{leaf("0", 1, wire.ItemDropped)}, []bool{true}, wire.StatusDropped},
		{"all failed", []wire.ItemResult{leaf("0", 1, wire.ItemError)}, []bool{true}, wire.StatusError},
		{"one degraded, the rest ok",
			[]wire.ItemResult{leaf("0.0", 2, wire.ItemDegraded), leaf("0.1", 2, wire.ItemOK)},
			[]bool{false, true}, wire.StatusDegraded},
		{"all degraded", []wire.ItemResult{leaf("0", 1, wire.ItemDegraded)}, []bool{true}, wire.StatusDegraded},
		{"degraded and dropped is partial",
			[]wire.ItemResult{leaf("0.0", 2, wire.ItemDegraded), leaf("0.1", 2, wire.ItemDropped)},
			[]bool{false, true}, wire.StatusPartial},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := New()
			for i, r := range tc.reports {
				done, _, err := tr.Add(r)
				if err != nil {
					t.Fatalf("report %d: %v", i, err)
				}
				if done != tc.wantDone[i] {
					t.Fatalf("after report %d (%s): done=%v, want %v", i, r.ID, done, tc.wantDone[i])
				}
			}
			if got := tr.Status(false); got != tc.wantStatus {
				t.Fatalf("status %q, want %q", got, tc.wantStatus)
			}
		})
	}
}

func TestTrackerRejectsInconsistentWeights(t *testing.T) {
	tr := New()
	if _, _, err := tr.Add(leaf("0.0", 1, wire.ItemOK)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.Add(leaf("0.1", 2, wire.ItemOK)); err == nil {
		t.Fatal("a weight past 1 was accepted")
	}
	if _, _, err := tr.Add(leaf("0.2", 0, wire.ItemOK)); err == nil {
		t.Fatal("a zero denominator was accepted")
	}
	if len(tr.Results()) != 1 {
		t.Fatalf("refused reports were recorded: %d results", len(tr.Results()))
	}
}

// TestTrackerRandomTrees builds random item trees (the shape a pipeline's fan-out makes), reports the leaves in a
// random order, and checks the tracker is done exactly at the last one.
func TestTrackerRandomTrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 500; trial++ {
		var leaves []wire.ItemResult
		var grow func(id string, den uint64, depth int)
		grow = func(id string, den uint64, depth int) {
			k := 0
			if depth < 3 {
				k = rng.IntN(6)
			}
			if k == 0 {
				leaves = append(leaves, leaf(id, den, wire.ItemOK))
				return
			}
			for i := 0; i < k; i++ {
				grow(wire.ChildItemID(id, i), den*uint64(k), depth+1)
			}
		}
		grow(wire.RootItemID, 1, 0)
		rng.Shuffle(len(leaves), func(i, j int) { leaves[i], leaves[j] = leaves[j], leaves[i] })
		tr := New()
		for i, l := range leaves {
			done, _, err := tr.Add(l)
			if err != nil {
				t.Fatal(err)
			}
			if done != (i == len(leaves)-1) {
				t.Fatalf("trial %d: done=%v after %d of %d leaves", trial, done, i+1, len(leaves))
			}
		}
	}
}

func BenchmarkTrackerAdd(b *testing.B) {
	for b.Loop() {
		tr := New()
		for i := 0; i < 4; i++ {
			tr.Add(leaf(wire.ChildItemID("0", i), 4, wire.ItemOK))
		}
	}
}
