// Package latency is what the cluster measures of its batch latencies and how the planner plans with it: a worker's
// recent batch latencies per variant and batch size (Window, reported in heartbeats as wire.BatchLatency), the
// planner's board of every live worker's reports (Board), and the blend of those measurements with the profile
// (Blend, Apply) that the allocation and the routing plan with. Pure: time is passed in; the worker service and the
// simulator's workers both measure through Window, the planner service and the simulator's planner both blend
// through Board.
package latency

import (
	"math"
	"slices"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Window settings. A summary covers the batches of the last WindowSpan, but never fewer than the newest KeepNewest
// of a bucket: a variant the planner moved away from keeps its last measurement while its worker lives, so that a
// slow variant does not look fast again (its idle profile) as soon as nobody runs it, and get planned again. Only
// while the variant runs: once one of its batch sizes has MinBatches batches within the span, that span is all its
// summary covers (superseded).
const (
	WindowSpan = 10 * time.Second
	KeepNewest = 32
	// maxSamples bounds one bucket's memory (a second of small fast batches can be hundreds).
	maxSamples = 1024
)

// Window holds one worker's recent batch latencies, per variant key ("pipeline:task/variant") and profiled batch
// size. Not safe for concurrent use.
type Window struct {
	buckets map[string]map[int]*samples
	// lastKey's buckets, the last Add's: a worker runs one variant for long, and its batches skip the hash of the
	// key (buckets are never deleted)
	lastKey   string
	lastByKey map[int]*samples
}

type samples struct {
	at []int64 // Unix ns, in order
	ms []float64
	// sorted is ms but its newest fresh samples, in ascending order: a summary sorts only the samples added since
	// the last one and merges them in (a sort of them all per bucket per heartbeat was a seventh of the
	// simulator's time, and an insertion per sample a twentieth).
	sorted []float64
	fresh  int
	gone   []float64 // scratch: the values dropped, or those merged in
	merged []float64 // scratch: the merge, swapped with sorted
}

// NewWindow returns an empty window.
func NewWindow() *Window { return &Window{buckets: map[string]map[int]*samples{}} }

// BatchOf is the profiled batch size a model batch of n items counts at: the smallest of v's profile of at least n
// (the point the planner budgets it at), the largest when n exceeds them all.
func BatchOf(v *pipeline.Variant, n int) int { return v.LatencyFor(n).Batch }

// Add records that key ran a model batch at profiled batch size batch that took d, ending at now.
func (w *Window) Add(key string, batch int, d time.Duration, now time.Time) {
	byBatch := w.lastByKey
	if byBatch == nil || key != w.lastKey {
		if byBatch = w.buckets[key]; byBatch == nil {
			byBatch = map[int]*samples{}
			w.buckets[key] = byBatch
		}
		w.lastKey, w.lastByKey = key, byBatch
	}
	s := byBatch[batch]
	if s == nil {
		s = &samples{}
		byBatch[batch] = s
	}
	if len(s.at) >= maxSamples {
		s.drop(len(s.at) - maxSamples/2)
	}
	ms := float64(d) / float64(time.Millisecond)
	s.at = append(s.at, now.UnixNano())
	s.ms = append(s.ms, ms)
	s.fresh++
}

// sort merges the fresh samples into sorted.
func (s *samples) sort() {
	if s.fresh == 0 {
		return
	}
	s.gone = append(s.gone[:0], s.ms[len(s.ms)-s.fresh:]...)
	slices.Sort(s.gone)
	s.merged = s.merged[:0]
	i, j := 0, 0
	for i < len(s.sorted) && j < len(s.gone) {
		if s.gone[j] < s.sorted[i] {
			s.merged = append(s.merged, s.gone[j])
			j++
		} else {
			s.merged = append(s.merged, s.sorted[i])
			i++
		}
	}
	s.merged = append(append(s.merged, s.sorted[i:]...), s.gone[j:]...)
	s.sorted, s.merged = s.merged, s.sorted
	s.fresh = 0
}

// drop forgets the oldest n samples, in ms and in sorted (one pass: the values dropped, sorted, are skipped in
// order; equal values are interchangeable).
func (s *samples) drop(n int) {
	s.sort()
	s.gone = append(s.gone[:0], s.ms[:n]...)
	slices.Sort(s.gone)
	kept, j := 0, 0
	for _, v := range s.sorted {
		if j < len(s.gone) && v == s.gone[j] {
			j++
			continue
		}
		s.sorted[kept] = v
		kept++
	}
	s.sorted = s.sorted[:kept]
	m := copy(s.at, s.at[n:])
	copy(s.ms, s.ms[n:])
	s.at, s.ms = s.at[:m], s.ms[:m]
}

// Summary is key's batches of the window as of now, per batch size in increasing order; nil when it ran none.
// Samples beyond the window (and beyond the newest KeepNewest, while the variant is not superseded) are dropped.
func (w *Window) Summary(key string, now time.Time) []wire.BatchLatency {
	if len(w.buckets[key]) == 0 {
		return nil
	}
	return w.AppendSummary(nil, key, now)
}

// AppendSummary appends key's summary (Summary) to dst: the simulator's workers summarise into one buffer.
func (w *Window) AppendSummary(dst []wire.BatchLatency, key string, now time.Time) []wire.BatchLatency {
	byBatch := w.buckets[key]
	cut := now.Add(-WindowSpan).UnixNano()
	keep := KeepNewest
	if superseded(byBatch, cut) {
		keep = 0
	}
	out := slices.Grow(dst, len(byBatch))
	first := len(out)
	for b, s := range byBatch {
		old := 0
		for old < len(s.at)-keep && s.at[old] < cut {
			old++
		}
		if old == len(s.at) {
			delete(byBatch, b)
			continue
		}
		if old > 0 {
			s.drop(old)
		}
		s.sort()
		out = append(out, wire.BatchLatency{Batch: b, Count: len(s.sorted), P50Ms: Quantile(s.sorted, 0.5),
			P95Ms: Quantile(s.sorted, 0.95)})
	}
	slices.SortFunc(out[first:], func(a, b wire.BatchLatency) int { return a.Batch - b.Batch })
	return out
}

// superseded says some bucket of byBatch holds MinBatches batches since cut: the variant runs now, and that
// measurement speaks for it; the older batches the other buckets keep (KeepNewest) are dropped, so that a batch size
// run less often than MinBatches a span is not reported (Blend scales it as the nearest measured one). Kept, the
// batch size a plan budgets at, which a slowdown's shorter queues (admission control bounds them) no longer fill,
// kept its figure from before the slowdown, and the planner planned with it: with every worker of the simulator twice
// as slow, the frontends refused requests for 35 s, against 9 s with it dropped (docs/admission.md).
func superseded(byBatch map[int]*samples, cut int64) bool {
	for _, s := range byBatch {
		if n := len(s.at); n >= MinBatches && s.at[n-MinBatches] >= cut {
			return true
		}
	}
	return false
}

// Quantile is the nearest-rank q-quantile of sorted (ascending, not empty): with 20 batches or more, the 95th
// percentile is below the slowest one, so a single outlier batch does not move it.
func Quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted))-1e-9)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
