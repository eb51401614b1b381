package latency

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func testSpec() *pipeline.Spec {
	return &pipeline.Spec{Name: "p", BatchSizes: []int{1, 2, 4}, Tasks: []pipeline.Task{{Name: "t", Variants: []pipeline.Variant{
		{Name: "a", Profile: []pipeline.ProfilePoint{{Batch: 1, P50Ms: 10, P95Ms: 12}, {Batch: 2, P50Ms: 15, P95Ms: 18},
			{Batch: 4, P50Ms: 25, P95Ms: 30}}},
		{Name: "b", Profile: []pipeline.ProfilePoint{{Batch: 1, P50Ms: 5, P95Ms: 6}, {Batch: 2, P50Ms: 8, P95Ms: 9},
			{Batch: 4, P50Ms: 12, P95Ms: 14}}},
	}}}}
}

var t0 = time.Unix(1000, 0)

func TestWindowQuantilesAndSpan(t *testing.T) {
	w, a := NewWindow(), &testSpec().Tasks[0].Variants[0]
	// 19 batches of 10 ms and one outlier of 1 s: the p95 of 20 is the 19th, not the outlier.
	for i := range 19 {
		w.Add("p:t/a", a, 1, 10*time.Millisecond, t0.Add(time.Duration(i)*time.Millisecond))
	}
	w.Add("p:t/a", a, 1, time.Second, t0.Add(20*time.Millisecond))
	s := w.Summary("p:t/a", t0.Add(time.Second))
	if len(s) != 1 || s[0].Batch != 1 || s[0].Count != 20 || s[0].P50Ms != 10 || s[0].P95Ms != 10 {
		t.Fatalf("summary %+v: want 20 batches, p50 = p95 = 10 ms", s)
	}
	// Past the span, the old samples go, except the newest KeepNewest.
	for i := range 100 {
		w.Add("p:t/a", a, 2, 20*time.Millisecond, t0.Add(time.Duration(i)*time.Millisecond))
	}
	w.Add("p:t/a", a, 2, 40*time.Millisecond, t0.Add(WindowSpan+time.Second))
	s = w.Summary("p:t/a", t0.Add(WindowSpan+2*time.Second))
	if len(s) != 2 || s[0].Count != 20 || s[1].Batch != 2 || s[1].Count != KeepNewest {
		t.Fatalf("summary %+v: want batch 1 with its 20 (all old, fewer than KeepNewest), batch 2 with KeepNewest", s)
	}
	if s[1].P95Ms != 20 || s[1].P50Ms != 20 { // the newest batch, 40 ms, is one outlier in 32
		t.Fatalf("batch 2: %+v", s[1])
	}
	if w.Summary("p:t/b", t0) != nil {
		t.Fatal("a variant never run has a summary")
	}
}

// TestWindowRaisesOlderBatchSizes: a worker ran batches of 4 at their profile (25 ms), then, twice as slow and with
// shorter queues, batches of 1 (20 ms, profile 10). While fewer than MinBatches batches of 1 are in the span, the
// older batches of 4 are the variant's figure; from MinBatches on, batch 1 reports its own batches in the span alone,
// and batch 4 (and a batch of 2 run once) at least as slow as batch 1's scale says. Faster is not carried over.
func TestWindowRaisesOlderBatchSizes(t *testing.T) {
	w, a := NewWindow(), &testSpec().Tasks[0].Variants[0]
	for i := range 40 {
		w.Add("p:t/a", a, 4, 25*time.Millisecond, t0.Add(time.Duration(i)*time.Millisecond))
	}
	w.Add("p:t/a", a, 1, 10*time.Millisecond, t0)
	w.Add("p:t/a", a, 2, 15*time.Millisecond, t0)
	later := t0.Add(WindowSpan + time.Second)
	for i := range MinBatches - 1 {
		w.Add("p:t/a", a, 1, 20*time.Millisecond, later.Add(time.Duration(i)*time.Millisecond))
	}
	s := w.Summary("p:t/a", later.Add(time.Second))
	if len(s) != 3 || s[0].Count != MinBatches || s[2].Count != KeepNewest || s[2].P50Ms != 25 {
		t.Fatalf("summary %+v: want the kept batches as they were, nothing current", s)
	}
	w.Add("p:t/a", a, 1, 20*time.Millisecond, later.Add(time.Second))
	s = w.Summary("p:t/a", later.Add(2*time.Second))
	want := []wire.BatchLatency{{Batch: 1, Count: MinBatches, P50Ms: 20, P95Ms: 20},
		{Batch: 2, Count: 1, P50Ms: 30, P95Ms: 18 * 20.0 / 12}, {Batch: 4, Count: KeepNewest, P50Ms: 50, P95Ms: 50}}
	if !slices.EqualFunc(s, want, func(x, y wire.BatchLatency) bool {
		return x.Batch == y.Batch && x.Count == y.Count && math.Abs(x.P50Ms-y.P50Ms) < 1e-9 &&
			math.Abs(x.P95Ms-y.P95Ms) < 1e-9
	}) {
		t.Fatalf("summary %+v: want %+v", s, want)
	}
	// Faster at batch 1 now: batch 4 keeps its own figure, not lowered.
	for i := range MinBatches {
		w.Add("p:t/a", a, 1, 5*time.Millisecond, later.Add(2*WindowSpan+time.Duration(i)*time.Millisecond))
	}
	if s = w.Summary("p:t/a", later.Add(2*WindowSpan+time.Second)); s[0].P50Ms != 5 || s[2].P50Ms != 25 {
		t.Fatalf("summary %+v: want batch 1 at 5 ms, batch 4 at its own 25", s)
	}
}

func TestWindowBounded(t *testing.T) {
	w, a := NewWindow(), &testSpec().Tasks[0].Variants[0]
	for i := range 10 * maxSamples {
		w.Add("k", a, 1, time.Millisecond, t0.Add(time.Duration(i)))
	}
	if n := len(w.buckets["k"].bucket(1).ms); n > maxSamples {
		t.Fatalf("%d samples kept: want at most %d", n, maxSamples)
	}
}

func beat(entries ...wire.BatchLatency) map[string]wire.Observed {
	return map[string]wire.Observed{"p:t/a": {Latency: entries}}
}

func TestBoardMergesFreshValidReports(t *testing.T) {
	spec := testSpec()
	b := NewBoard()
	b.Set("w1", t0, beat(wire.BatchLatency{Batch: 1, Count: 20, P50Ms: 20, P95Ms: 24}))
	b.Set("w2", t0, beat(wire.BatchLatency{Batch: 1, Count: 60, P50Ms: 10, P95Ms: 12},
		wire.BatchLatency{Batch: 2, Count: 19, P50Ms: 50, P95Ms: 60},         // too few batches
		wire.BatchLatency{Batch: 3, Count: 50, P50Ms: 50, P95Ms: 60},         // not a profiled batch size
		wire.BatchLatency{Batch: 4, Count: 50, P50Ms: math.NaN(), P95Ms: 60}, // not a figure
		wire.BatchLatency{Batch: 4, Count: 50, P50Ms: 70, P95Ms: 60}))        // p50 above p95
	b.Set("w3", t0.Add(-time.Minute), beat(wire.BatchLatency{Batch: 1, Count: 100, P50Ms: 99, P95Ms: 99})) // stale
	b.Set("w4", t0, map[string]wire.Observed{"q:t/a": {Latency: []wire.BatchLatency{{Batch: 1, Count: 100, P50Ms: 99, P95Ms: 99}}},
		"p:t/zz": {Latency: []wire.BatchLatency{{Batch: 1, Count: 100, P50Ms: 99, P95Ms: 99}}}}) // other pipeline, unknown variant
	m := b.Measured(spec, t0.Add(time.Second), 5*time.Second)
	want := wire.BatchLatency{Batch: 1, Count: 80, P50Ms: 12.5, P95Ms: 15}
	if len(m) != 1 || len(m["t/a"]) != 1 || m["t/a"][0] != want {
		t.Fatalf("measured %+v: want only t/a %+v", m, want)
	}
	b.Forget("w2")
	b.Forget("w1")
	if m := b.Measured(spec, t0.Add(time.Second), 5*time.Second); len(m) != 0 {
		t.Fatalf("measured %+v after its workers left", m)
	}
}

func TestBlend(t *testing.T) {
	spec := testSpec()
	// Batch 2 measured at twice its profiled p50 and p95 over 90 batches: 1 + 0.9 x 1 = 1.9.
	got := Blend(spec, map[string][]wire.BatchLatency{"t/a": {{Batch: 2, Count: 90, P50Ms: 30, P95Ms: 36}}})
	if _, ok := got["t/b"]; ok {
		t.Fatal("a variant never run does not keep its profile")
	}
	a := got["t/a"]
	if len(a) != 3 {
		t.Fatalf("blended %+v", got)
	}
	for i, p := range spec.Variant("t", "a").Profile {
		// Batch sizes 1 and 4 were not measured: the nearest measured, batch 2, scales them.
		if math.Abs(a[i].P50Ms-1.9*p.P50Ms) > 1e-9 || math.Abs(a[i].P95Ms-1.9*p.P95Ms) > 1e-9 {
			t.Fatalf("point %d: %+v, want %+v scaled by 1.9", i, a[i], p)
		}
	}
	// One wild measurement is bounded.
	got = Blend(spec, map[string][]wire.BatchLatency{"t/a": {{Batch: 1, Count: 1e6, P50Ms: 1e6, P95Ms: 1e6}}})
	if s := got["t/a"][0].P50Ms / 10; math.Abs(s-MaxScale) > 1e-9 {
		t.Fatalf("scale %v: want bounded at %v", s, MaxScale)
	}
	// The p50 and the p95 scale by their own measurements.
	got = Blend(spec, map[string][]wire.BatchLatency{"t/a": {{Batch: 1, Count: 1e6, P50Ms: 20, P95Ms: 48}}})
	if p := got["t/a"][0]; math.Abs(p.P50Ms-20) > 0.01 || math.Abs(p.P95Ms-48) > 0.01 {
		t.Fatalf("blended %+v: want p50 20, p95 48", p)
	}
	// Latency stays non-decreasing in the batch size.
	got = Blend(spec, map[string][]wire.BatchLatency{"t/a": {{Batch: 1, Count: 1e6, P50Ms: 24, P95Ms: 24},
		{Batch: 2, Count: 1e6, P50Ms: 18, P95Ms: 18}}})
	if p := got["t/a"]; p[1].P50Ms < p[0].P50Ms || p[2].P50Ms < p[1].P50Ms {
		t.Fatalf("blended %+v: latency decreases with the batch", p)
	}
}

func TestApplyAndMoved(t *testing.T) {
	spec := testSpec()
	slow := Blend(spec, map[string][]wire.BatchLatency{"t/a": {{Batch: 1, Count: 1e6, P50Ms: 20, P95Ms: 24}}})
	c := Apply(spec, slow)
	if math.Abs(c.Variant("t", "a").Profile[0].P50Ms-20) > 0.01 || spec.Variant("t", "a").Profile[0].P50Ms != 10 {
		t.Fatalf("applied %v, spec %v: want 20 in the copy, the spec unchanged", c.Variant("t", "a").Profile,
			spec.Variant("t", "a").Profile)
	}
	if c.Variant("t", "b") == spec.Variant("t", "b") || c.Variant("t", "b").Profile[0] != spec.Variant("t", "b").Profile[0] {
		t.Fatal("the other variant changed")
	}
	if Apply(spec, nil) != spec {
		t.Fatal("nothing to apply: want the spec itself")
	}
	if !Moved(spec, nil, slow, 0.2) || !Moved(spec, slow, nil, 0.2) || Moved(spec, slow, slow, 0.2) {
		t.Fatal("Moved: a doubled profile must count, the same one not")
	}
	near := Blend(spec, map[string][]wire.BatchLatency{"t/a": {{Batch: 1, Count: 1e6, P50Ms: 10.8, P95Ms: 13}}})
	if Moved(spec, nil, near, 0.2) || !Moved(spec, nil, near, 0.05) {
		t.Fatal("Moved: an 8% change is within 20%, beyond 5%")
	}
	// Each direction its own threshold: twice as slow counts against a slower threshold of 0.2, half as fast (the
	// way back) only against a faster one below 0.5.
	if !MovedBy(spec, nil, slow, 0.2, 0.6) || MovedBy(spec, slow, nil, 0.2, 0.6) || !MovedBy(spec, slow, nil, 0.2, 0.4) {
		t.Fatal("MovedBy: slower by 100% beyond 0.2; faster by 50% within 0.6, beyond 0.4")
	}
}

// TestWindowSummaryMatchesASort: the samples a window keeps sorted as they come and go (past the span, past
// maxSamples) give the quantiles a sort of the kept samples gives, and AppendSummary appends what Summary returns.
func TestWindowSummaryMatchesASort(t *testing.T) {
	w, a := NewWindow(), &testSpec().Tasks[0].Variants[0]
	rng := rand.New(rand.NewPCG(1, 2))
	at := t0
	for i := range 20000 {
		gap := 20 * time.Millisecond
		if i < 10000 {
			gap = time.Millisecond // a burst: a bucket reaches maxSamples
		}
		at = at.Add(time.Duration(rng.IntN(int(gap))))
		batch := 1 + rng.IntN(2)
		w.Add("k", a, batch, time.Duration(rng.IntN(50))*time.Millisecond, at) // many equal values
		if i%97 != 0 {
			continue
		}
		got := w.Summary("k", at)
		cut := at.Add(-WindowSpan).UnixNano()
		for _, e := range got {
			if n := w.buckets["k"].bucket(e.Batch).since(cut); n < MinBatches && slices.ContainsFunc(got,
				func(o wire.BatchLatency) bool { return w.buckets["k"].bucket(o.Batch).since(cut) >= MinBatches }) {
				continue // raised (TestWindowRaisesOlderBatchSizes)
			}
			sorted := slices.Clone(w.buckets["k"].bucket(e.Batch).ms)
			slices.Sort(sorted)
			want := wire.BatchLatency{Batch: e.Batch, Count: len(sorted), P50Ms: Quantile(sorted, 0.5),
				P95Ms: Quantile(sorted, 0.95)}
			if e != want {
				t.Fatalf("sample %d: summary %+v, want %+v", i, e, want)
			}
		}
		if app := w.AppendSummary([]wire.BatchLatency{{Batch: 99}}, "k", at); !slices.Equal(app[1:], got) {
			t.Fatalf("appended %+v, want %+v after the first", app, got)
		}
	}
}

// TestSearch: search is the first index not below v, on runs of equal values and beyond either end.
func TestSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		s := make([]float64, rng.IntN(40))
		for i := range s {
			s[i] = float64(rng.IntN(10))
		}
		slices.Sort(s)
		v := float64(rng.IntN(12) - 1)
		want, _ := slices.BinarySearch(s, v)
		if got := search(s, v); got != want {
			t.Fatalf("search(%v, %v) = %d, want %d", s, v, got, want)
		}
	}
}
