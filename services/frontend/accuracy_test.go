package frontend

import (
	"math"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestServedAccuracyWeighsBranches: a joined request's two leaves (the merge's, through the detector, and the
// captioner's part, each half the request) count by their branches' weights (pipeline.Task.BranchWeights), as the
// planner and the simulator count them; without weights, evenly.
func TestServedAccuracyWeighsBranches(t *testing.T) {
	spec, err := pipeline.Load("../../examples/social.yaml")
	if err != nil {
		t.Fatal(err)
	}
	results := []wire.ItemResult{
		{Status: wire.ItemOK, Den: 2, Path: []string{"ingest/resize", "detect/yolov5x", "merge/concat"}},
		{Status: wire.ItemOK, Den: 2, Path: []string{"ingest/resize", "caption/cap_large"}},
	}
	if got, want := servedAccuracy(spec, nil, results), (0.507+0.89)/2; math.Abs(got-want) > 1e-9 {
		t.Errorf("even: %.4f, want %.4f", got, want)
	}
	spec.Task("ingest").BranchWeights = map[string]float64{"detect": 0.9, "caption": 0.1}
	if got, want := servedAccuracy(spec, nil, results), 0.9*0.507+0.1*0.89; math.Abs(got-want) > 1e-9 {
		t.Errorf("weighted: %.4f, want %.4f", got, want)
	}
}
