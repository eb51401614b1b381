package latency

import (
	"math"
	"slices"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Blend settings: how far measurements move a profile.
const (
	// MinBatches is the fewest batches a worker's summary of one batch size must rest on to count: below it, its
	// 95th percentile is (or is next to) its slowest batch, and one outlier would move the plan.
	MinBatches = 20
	// PriorBatches is the profile's weight, in batches: n measured batches move a point n/(n+PriorBatches) of the
	// way from the profile to the measurement. Small: a worker that runs few batches reports the newest 32 of them
	// (KeepNewest), and these should outweigh an idle machine's profile (with 20, a hog's slowdown was planned 40%
	// short of what the OCR workers measured).
	PriorBatches = 10
	// MinScale and MaxScale bound how far measurements may scale a profile point.
	MinScale = 0.25
	MaxScale = 8
)

// Board holds the newest latency reports of each worker, as its heartbeats carry them, for the planner (and the
// simulator's planner). A worker's reports count while they are fresh and are forgotten when it leaves. Not safe
// for concurrent use.
type Board struct {
	reports map[string]report // by worker id
	// What Measured works out once, not per pipeline per tick: the workers in order (nil: to sort again), each key
	// parsed (a few thousand at most: forgotten beyond), and its sums' scratch.
	workers []string
	parsed  map[string]parsedKey
	sums    map[string][]batchSums
	order   []string // sums' keys in the order first summed
}

// parsedKey is a "pipeline:task/variant" key as Measured reads it: its pipeline, its task and variant, and its
// "task/variant"; ok false when it does not parse.
type parsedKey struct {
	served  wire.ServedKey
	variant string
	ok      bool
}

// batchSums are one variant's batches of one size as Measured adds them up: counts, and quantiles times counts.
type batchSums struct {
	batch       int
	n, p50, p95 float64
}

// maxParsed bounds Board.parsed: workers report their variants' keys, a few per pipeline.
const maxParsed = 4096

type report struct {
	at      time.Time
	latency map[string][]wire.BatchLatency // by "pipeline:task/variant"
}

// NewBoard returns a board that has heard from no worker.
func NewBoard() *Board { return &Board{reports: map[string]report{}} }

// Set keeps the latency summaries of a worker's heartbeat received at, in place of its previous ones.
func (b *Board) Set(worker string, at time.Time, observed map[string]wire.Observed) {
	r, known := b.reports[worker] // its map and slices are reused: a worker reports every few seconds, for good
	if !known {
		b.workers = nil
	}
	r.at = at
	if r.latency == nil {
		r.latency = map[string][]wire.BatchLatency{}
	}
	for key := range r.latency {
		if len(observed[key].Latency) == 0 {
			delete(r.latency, key)
		}
	}
	for key, o := range observed {
		if len(o.Latency) > 0 {
			r.latency[key] = append(r.latency[key][:0], o.Latency...)
		}
	}
	b.reports[worker] = r
}

// Forget drops a worker that left: its measurements no longer count.
func (b *Board) Forget(worker string) {
	if _, ok := b.reports[worker]; ok {
		delete(b.reports, worker)
		b.workers = nil
	}
}

// Workers is how many workers' reports the board keeps.
func (b *Board) Workers() int { return len(b.reports) }

// Measured merges, per variant of spec ("task/variant"), the summaries of the workers that reported within maxAge
// of now, per batch size: counts add up, quantiles are averaged weighted by count. Summaries of unknown variants or
// batch sizes, of fewer than MinBatches batches, or with figures that are not positive and finite are left out.
func (b *Board) Measured(spec *pipeline.Spec, now time.Time, maxAge time.Duration) map[string][]wire.BatchLatency {
	if b.workers == nil {
		b.workers = make([]string, 0, len(b.reports))
		for id := range b.reports {
			b.workers = append(b.workers, id)
		}
		slices.Sort(b.workers) // a fixed order of additions: the simulator's runs must not depend on map order
	}
	if b.sums == nil {
		b.sums = map[string][]batchSums{}
	}
	clear(b.sums)
	b.order = b.order[:0]
	for _, id := range b.workers {
		r := b.reports[id]
		if now.Sub(r.at) > maxAge {
			continue
		}
		for key, entries := range r.latency {
			pk := b.parse(key)
			if !pk.ok || pk.served.Pipeline != spec.Name {
				continue
			}
			v := spec.Variant(pk.served.Task, pk.served.Variant)
			if v == nil {
				continue
			}
			for _, e := range entries {
				if _, ok := v.Point(e.Batch); !ok || !usable(e) {
					continue
				}
				sums, seen := b.sums[pk.variant]
				if !seen {
					b.order = append(b.order, pk.variant)
				}
				i := slices.IndexFunc(sums, func(s batchSums) bool { return s.batch == e.Batch })
				if i < 0 {
					i = len(sums)
					sums = append(sums, batchSums{batch: e.Batch})
				}
				n := float64(e.Count)
				sums[i].n += n
				sums[i].p50 += n * e.P50Ms
				sums[i].p95 += n * e.P95Ms
				b.sums[pk.variant] = sums
			}
		}
	}
	out := make(map[string][]wire.BatchLatency, len(b.order))
	for _, key := range b.order {
		sums := b.sums[key]
		lat := make([]wire.BatchLatency, len(sums))
		for i, s := range sums {
			lat[i] = wire.BatchLatency{Batch: s.batch, Count: int(s.n), P50Ms: s.p50 / s.n, P95Ms: s.p95 / s.n}
		}
		slices.SortFunc(lat, func(a, b wire.BatchLatency) int { return a.Batch - b.Batch })
		out[key] = lat
	}
	return out
}

// parse is key parsed, from the board's cache.
func (b *Board) parse(key string) parsedKey {
	if pk, ok := b.parsed[key]; ok {
		return pk
	}
	if b.parsed == nil || len(b.parsed) >= maxParsed {
		b.parsed = map[string]parsedKey{}
	}
	served, err := wire.ParseServedKey(key)
	pk := parsedKey{served: served, ok: err == nil}
	if pk.ok {
		pk.variant = served.Key().String()
	}
	b.parsed[key] = pk
	return pk
}

func usable(e wire.BatchLatency) bool {
	ok := func(f float64) bool { return f > 0 && !math.IsInf(f, 0) }
	return e.Count >= MinBatches && ok(e.P50Ms) && ok(e.P95Ms) && e.P50Ms <= e.P95Ms
}

// Blend is, per measured variant of spec ("task/variant"), its profile scaled by what was measured: a batch size
// measured n times scales its point's p50 by the measured p50 over the profiled one, and its p95 and p99 by the
// measured p95 over the profiled p95, each moved n/(n+PriorBatches) of the way from 1 and bounded to [MinScale,
// MaxScale]; a batch size not measured takes the scales of the nearest measured one (the larger on a tie). The
// allocation's rows (latency and throughput of a replica) read the p50, as they read the profile's: scaling them
// by the p95's ratio would take a slower machine's longer tail for a lower throughput (with a CPU hog on one of two
// cores, the OCR detector's p50 ran 3 times its profile and its p95 7 times, and the planner so scaled found 10 QPS
// beyond the cluster). Latency stays non-decreasing in the batch size, as the profiler writes it. Variants not
// measured are not listed: they keep their profile.
func Blend(spec *pipeline.Spec, measured map[string][]wire.BatchLatency) map[string][]pipeline.ProfilePoint {
	out := map[string][]pipeline.ProfilePoint{}
	for key, entries := range measured {
		_, v := spec.Lookup(key)
		if v == nil || len(entries) == 0 {
			continue
		}
		s50 := make([]float64, len(v.Profile)) // 0: not measured
		s95 := make([]float64, len(v.Profile))
		for _, e := range entries {
			i := slices.IndexFunc(v.Profile, func(p pipeline.ProfilePoint) bool { return p.Batch == e.Batch })
			if i < 0 || e.Count <= 0 {
				continue
			}
			p := v.Profile[i]
			w := float64(e.Count) / (float64(e.Count) + PriorBatches)
			scale := func(measured, profiled float64) float64 {
				return min(max(1+w*(measured/profiled-1), MinScale), MaxScale)
			}
			ref95 := p.P95Ms
			if ref95 <= 0 {
				ref95 = p.P50Ms
			}
			s50[i], s95[i] = scale(e.P50Ms, p.P50Ms), scale(e.P95Ms, ref95)
		}
		if !slices.ContainsFunc(s50, func(s float64) bool { return s > 0 }) {
			continue
		}
		points := make([]pipeline.ProfilePoint, len(v.Profile))
		for i, p := range v.Profile {
			j := nearest(s50, i)
			points[i] = pipeline.ProfilePoint{Batch: p.Batch, P50Ms: p.P50Ms * s50[j], P95Ms: p.P95Ms * s95[j],
				P99Ms: p.P99Ms * s95[j]}
			points[i].P95Ms = max(points[i].P95Ms, points[i].P50Ms)
			if i > 0 {
				prev := points[i-1]
				points[i].P50Ms = max(points[i].P50Ms, prev.P50Ms)
				points[i].P95Ms = max(points[i].P95Ms, prev.P95Ms)
				if points[i].P99Ms > 0 {
					points[i].P99Ms = max(points[i].P99Ms, prev.P99Ms)
				}
			}
		}
		out[key] = points
	}
	return out
}

// nearest is i when scale[i] was measured, else the index of the measured scale nearest i (the larger on a tie);
// some scale must have been measured.
func nearest(scale []float64, i int) int {
	for d := 0; ; d++ {
		if j := i + d; j < len(scale) && scale[j] > 0 {
			return j
		}
		if j := i - d; j >= 0 && scale[j] > 0 {
			return j
		}
	}
}

// Apply is spec with the profiles of profiles ("task/variant" -> points) in place of its own; spec itself when there
// are none. spec is not changed.
func Apply(spec *pipeline.Spec, profiles map[string][]pipeline.ProfilePoint) *pipeline.Spec {
	if len(profiles) == 0 {
		return spec
	}
	c := *spec
	c.Tasks = slices.Clone(spec.Tasks)
	for ti := range c.Tasks {
		t := &c.Tasks[ti]
		cloned := false
		for vi := range t.Variants {
			p, ok := profiles[wire.VariantKey{Task: t.Name, Variant: t.Variants[vi].Name}.String()]
			if !ok {
				continue
			}
			if !cloned {
				t.Variants, cloned = slices.Clone(t.Variants), true
			}
			t.Variants[vi].Profile = p
		}
	}
	return &c
}

// Moved reports whether the profiles a and b ("task/variant" -> points; a variant not listed has spec's profile)
// differ by more than threshold, relative, at any point's p50: enough to solve the allocation again.
func Moved(spec *pipeline.Spec, a, b map[string][]pipeline.ProfilePoint, threshold float64) bool {
	return MovedBy(spec, a, b, threshold, threshold)
}

// MovedBy is Moved with a threshold of its own for each direction: some point of b slower than a's by more than
// slower (relative), or faster by more than faster.
func MovedBy(spec *pipeline.Spec, a, b map[string][]pipeline.ProfilePoint, slower, faster float64) bool {
	differs := func(key string) bool {
		_, v := spec.Lookup(key)
		if v == nil {
			return false
		}
		pa, ok := a[key]
		if !ok {
			pa = v.Profile
		}
		pb, ok := b[key]
		if !ok {
			pb = v.Profile
		}
		if len(pa) != len(pb) {
			return true
		}
		for i := range pa {
			if r := pb[i].P50Ms / pa[i].P50Ms; r-1 > slower || 1-r > faster {
				return true
			}
		}
		return false
	}
	for key := range a {
		if differs(key) {
			return true
		}
	}
	for key := range b {
		if differs(key) {
			return true
		}
	}
	return false
}
