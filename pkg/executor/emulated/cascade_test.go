package emulated

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// TestConfidenceMatchesLevels: the answers the emulated cascade's first variant draws escalate, at each threshold,
// the share of items pipeline.LevelAt computes, and those it keeps are right as often as the level says: what makes
// an emulated cascade's accuracy known.
func TestConfidenceMatchesLevels(t *testing.T) {
	spec, err := pipeline.Load("../../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	task := spec.Task("classify")
	first := spec.Variant("classify", task.Cascade.Variants[0])
	e := New(spec, "classify", first, 7)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200000
	type answer struct {
		conf  float64
		right bool
	}
	answers := make([]answer, n)
	for i := range answers {
		answers[i].conf, answers[i].right = e.Answer(rng)
	}
	for _, l := range task.Cascade.Levels {
		var escalated, kept, keptRight float64
		for _, a := range answers {
			if a.conf < l.Threshold {
				escalated++
			} else if kept++; a.right {
				keptRight++
			}
		}
		rate, acc := escalated/n, keptRight/kept
		tol := 4 * math.Sqrt(l.Escalation*(1-l.Escalation)/n)
		if math.Abs(rate-l.Escalation) > tol {
			t.Errorf("threshold %v: escalated %.4f of the items, the level says %.4f (+-%.4f)", l.Threshold, rate,
				l.Escalation, tol)
		}
		if tol := 4 * math.Sqrt(l.Accuracy*(1-l.Accuracy)/kept); math.Abs(acc-l.Accuracy) > tol {
			t.Errorf("threshold %v: kept items right %.4f, the level says %.4f (+-%.4f)", l.Threshold, acc,
				l.Accuracy, tol)
		}
	}
}

// TestExecuteReportsConfidence: Execute gives each item the confidence Answer draws for it, the same again for the
// same item (a redelivery escalates it the same way), and various ones across items.
func TestExecuteReportsConfidence(t *testing.T) {
	spec, err := pipeline.Load("../../../examples/cascade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	v := spec.Variant("classify", "effnet_b0")
	e := New(spec, "classify", v, 3)
	e.sleep = func(context.Context, time.Duration) error { return nil }
	batch := make([]executor.Input, 8)
	for i := range batch {
		batch[i] = executor.Input{RequestID: "r", ItemID: string(rune('a' + i))}
	}
	a, err := e.Execute(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := e.Execute(context.Background(), batch)
	distinct := map[float64]bool{}
	for i := range a {
		if a[i].Confidence != b[i].Confidence {
			t.Errorf("item %d: confidence %v, then %v", i, a[i].Confidence, b[i].Confidence)
		}
		if a[i].Confidence < 0 || a[i].Confidence > 1 {
			t.Errorf("item %d: confidence %v outside [0, 1]", i, a[i].Confidence)
		}
		distinct[a[i].Confidence] = true
	}
	if len(distinct) < 4 {
		t.Errorf("%d distinct confidences over 8 items: %v", len(distinct), distinct)
	}
}
