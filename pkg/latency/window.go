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
// slow variant does not look fast again (its idle profile) as soon as nobody runs it, and get planned again. While
// one batch size of a variant has MinBatches batches within the span, that batch size reports those alone, and the
// others are reported at least as slow as its scale over the profile says (AppendSummary).
const (
	WindowSpan = 10 * time.Second
	KeepNewest = 32
	// maxSamples bounds one bucket's memory (a second of small fast batches can be hundreds).
	maxSamples = 1024
)

// Window holds one worker's recent batch latencies, per variant key ("pipeline:task/variant") and profiled batch
// size. Not safe for concurrent use.
type Window struct {
	buckets map[string]*variantSamples
	// lastKey's buckets, the last Add's: a worker runs one variant for long, and its batches skip the hash of the
	// key (buckets are never deleted)
	lastKey  string
	lastVars *variantSamples
}

// variantSamples are one variant's buckets, in increasing batch size (a variant has a few: a scan finds one, and a
// summary needs no sort), and its profile, which a summary scales older batch sizes by.
type variantSamples struct {
	variant *pipeline.Variant
	byBatch []*samples
	current []bool // AppendSummary's scratch: per bucket, whether it is current
}

type samples struct {
	batch int
	at    []int64 // Unix ns, in order
	ms    []float64
	// sorted is ms in ascending order, kept so as samples come (inserted where they go) and go (removed): a
	// summary reads its quantiles off it (a sort per bucket per heartbeat was a seventh of the simulator's time,
	// and merging the samples of the last second in a tenth).
	sorted []float64
	gone   []float64 // scratch: the values dropped in one pass
}

// NewWindow returns an empty window.
func NewWindow() *Window {
	return &Window{buckets: map[string]*variantSamples{}}
}

// BatchOf is the profiled batch size a model batch of n items counts at: the smallest of v's profile of at least n
// (the point the planner budgets it at), the largest when n exceeds them all.
func BatchOf(v *pipeline.Variant, n int) int { return v.LatencyFor(n).Batch }

// Add records that key, a served variant v, ran a model batch of n items that took d, ending at now: at the profiled
// batch size it counts at (BatchOf).
func (w *Window) Add(key string, v *pipeline.Variant, n int, d time.Duration, now time.Time) {
	w.AddAt(key, v, n, d, now.UnixNano())
}

// AddAt is Add at now in Unix nanoseconds (the simulator's clock).
func (w *Window) AddAt(key string, v *pipeline.Variant, n int, d time.Duration, now int64) {
	batch := BatchOf(v, n)
	vs := w.lastVars
	if vs == nil || key != w.lastKey {
		if vs = w.buckets[key]; vs == nil {
			vs = &variantSamples{}
			w.buckets[key] = vs
		}
		vs.variant = v
		w.lastKey, w.lastVars = key, vs
	}
	s := vs.bucket(batch)
	if len(s.at) >= maxSamples {
		s.drop(len(s.at) - maxSamples/2)
	}
	ms := float64(d) / float64(time.Millisecond)
	s.at = append(s.at, now)
	s.ms = append(s.ms, ms)
	s.sorted = slices.Insert(s.sorted, search(s.sorted, ms), ms)
}

// bucket is the samples of batch, added in order when new.
func (vs *variantSamples) bucket(batch int) *samples {
	i := 0
	for i < len(vs.byBatch) && vs.byBatch[i].batch < batch {
		i++
	}
	if i < len(vs.byBatch) && vs.byBatch[i].batch == batch {
		return vs.byBatch[i]
	}
	s := &samples{batch: batch}
	vs.byBatch = slices.Insert(vs.byBatch, i, s)
	return s
}

// search is the first index of sorted whose value is not below v: without branches on the values (a window's
// latencies are noise, and a mispredicted branch per halving made the binary search most of a drop's time), and
// without slices.BinarySearch's ordering of NaNs (a window has none).
func search(sorted []float64, v float64) int {
	if len(sorted) == 0 {
		return 0
	}
	base, n := 0, len(sorted)
	for n > 1 {
		half := n / 2
		below := 0
		if sorted[base+half] < v {
			below = 1
		}
		base += half * below // a conditional move, where an if adding half branches
		n -= half
	}
	if sorted[base] < v {
		base++
	}
	return base
}

// smallDrop is the most samples drop removes one by one (a search and a move each); more are removed in one pass.
const smallDrop = 16

// drop forgets the oldest n samples, in ms and in sorted (equal values are interchangeable).
func (s *samples) drop(n int) {
	if n <= smallDrop {
		for _, v := range s.ms[:n] {
			i := search(s.sorted, v)
			s.sorted = slices.Delete(s.sorted, i, i+1)
		}
	} else { // the values dropped, sorted, skipped in order in one pass
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
	}
	m := copy(s.at, s.at[n:])
	copy(s.ms, s.ms[n:])
	s.at, s.ms = s.at[:m], s.ms[:m]
}

// Summary is key's batches of the window as of now, per batch size in increasing order; nil when it ran none.
// Samples beyond the window are dropped, but for the newest KeepNewest of a batch size that is not current
// (AppendSummary).
func (w *Window) Summary(key string, now time.Time) []wire.BatchLatency {
	if vs := w.buckets[key]; vs == nil || len(vs.byBatch) == 0 {
		return nil
	}
	return w.AppendSummary(nil, key, now)
}

// AppendSummary appends key's summary (Summary) to dst: the simulator's workers summarise into one buffer.
//
// A batch size with MinBatches batches within the window (current) reports only those: the variant runs at it now.
// Then every other batch size, whose figure may be older, is reported at least as slow as the profile scaled by the
// nearest current one (the larger on a tie). Otherwise the batch size a plan budgets at, which the shorter queues of
// a slowdown no longer fill (admission control bounds them), kept its figure from before the slowdown while the
// workers ran smaller batches twice as slow, and the planner planned with it: the simulator's frontends refused
// requests for 35 s, against 12 s (docs/admission.md). Only slower: a variant that got faster still looks slow at a
// batch size no longer run, as one no longer run at all does.
func (w *Window) AppendSummary(dst []wire.BatchLatency, key string, now time.Time) []wire.BatchLatency {
	vs := w.buckets[key]
	if vs == nil {
		return dst
	}
	cut := now.Add(-WindowSpan).UnixNano()
	vs.current = vs.current[:0]
	anyCurrent := false
	for _, s := range vs.byBatch {
		c := s.since(cut) >= MinBatches
		vs.current = append(vs.current, c)
		anyCurrent = anyCurrent || c
	}
	out := slices.Grow(dst, len(vs.byBatch))
	first := len(out)
	for i, s := range vs.byBatch {
		keep := KeepNewest
		if vs.current[i] {
			keep = 0
		}
		old := 0
		for old < len(s.at)-keep && s.at[old] < cut {
			old++
		}
		if old > 0 {
			s.drop(old)
		}
		out = append(out, wire.BatchLatency{Batch: s.batch, Count: len(s.sorted), P50Ms: Quantile(s.sorted, 0.5),
			P95Ms: Quantile(s.sorted, 0.95)})
	}
	if anyCurrent {
		raiseOlder(out[first:], vs.current, vs.variant)
	}
	return out
}

// raiseOlder raises the figures of sum's batch sizes that are not current (current, aligned with sum: fewer than
// MinBatches batches in the span) to at least v's profile scaled as the nearest current one: the p50 by its p50's
// scale, the p95 by its p95's.
func raiseOlder(sum []wire.BatchLatency, current []bool, v *pipeline.Variant) {
	if v == nil {
		return
	}
	for i := range sum {
		if current[i] {
			continue
		}
		j := -1
		for d := 1; j < 0 && (i+d < len(sum) || i-d >= 0); d++ {
			if i+d < len(sum) && current[i+d] {
				j = i + d
			} else if i-d >= 0 && current[i-d] {
				j = i - d
			}
		}
		p, ok1 := v.Point(sum[i].Batch)
		q, ok2 := v.Point(sum[j].Batch)
		if !ok1 || !ok2 || q.P50Ms <= 0 {
			continue
		}
		sum[i].P50Ms = max(sum[i].P50Ms, p.P50Ms*sum[j].P50Ms/q.P50Ms)
		if p.P95Ms > 0 && q.P95Ms > 0 {
			sum[i].P95Ms = max(sum[i].P95Ms, p.P95Ms*sum[j].P95Ms/q.P95Ms)
		}
		sum[i].P95Ms = max(sum[i].P95Ms, sum[i].P50Ms)
	}
}

// since is how many of s's batches ended at cut or later.
func (s *samples) since(cut int64) int {
	i, _ := slices.BinarySearch(s.at, cut)
	return len(s.at) - i
}

// Quantile is the nearest-rank q-quantile of sorted (ascending, not empty): with 20 batches or more, the 95th
// percentile is below the slowest one, so a single outlier batch does not move it.
func Quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted))-1e-9)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
