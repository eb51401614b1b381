package demand

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/internal/alloctest"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestTrafficGaps: each frontend's newest MaxGaps gaps are kept, oldest first; a frontend silent for longer than
// MaxAge leaves the sample; a report with a malformed gap is refused whole.
func TestTrafficGaps(t *testing.T) {
	tr := NewTraffic()
	tr.MaxGaps = 4
	t0 := time.Unix(100, 0)
	if s := tr.Sample(t0); s != nil {
		t.Fatalf("nothing observed: %+v, want nil", s)
	}
	tr.Observe(wire.DemandReport{Frontend: "b", GapsMs: []float32{1, 2, 3}}, t0)
	tr.Observe(wire.DemandReport{Frontend: "b", GapsMs: []float32{4, 5}}, t0.Add(time.Second))
	tr.Observe(wire.DemandReport{Frontend: "a", GapsMs: []float32{10}}, t0)
	if err := tr.Observe(wire.DemandReport{Frontend: "a", GapsMs: []float32{7, float32(math.NaN())}}, t0); err == nil {
		t.Error("a NaN gap was taken")
	}
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	s := tr.Sample(t0.Add(2 * time.Second))
	if len(s.Gaps) != 2 || !slices.Equal(s.Gaps[0], ms(10)) || !slices.Equal(s.Gaps[1], ms(2, 3, 4, 5)) {
		t.Errorf("gaps %v, want a's [10ms] and b's newest four", s.Gaps)
	}
	s = tr.Sample(t0.Add(5*time.Second + time.Millisecond))
	if len(s.Gaps) != 1 || !slices.Equal(s.Gaps[0], ms(2, 3, 4, 5)) {
		t.Errorf("a silent for more than 5 s: gaps %v, want b's alone", s.Gaps)
	}
}

// TestTrafficSubRequests: the histograms of the heartbeats' differences add up to each variant's distribution; the
// open last bucket's mean comes from the sub-requests counted per child; past MaxItems the older counts weigh half;
// a histogram longer than wire.MaxSubRequestBuckets is ignored.
func TestTrafficSubRequests(t *testing.T) {
	tr := NewTraffic()
	tr.MaxItems = 100
	last := wire.MaxSubRequestBuckets - 1
	h := make([]uint64, last+1)
	h[0], h[2], h[last] = 10, 20, 10 // 40 items: 0, 2 each, and 10 of at least 63 (700 sub-requests)
	tr.Fold("a/x", wire.FanoutCounts{Items: 40, Children: map[string]uint64{"b": 500, "c": 240}, SubRequests: h})
	tr.Fold("a/x", wire.FanoutCounts{SubRequests: make([]uint64, last+2)}) // malformed: ignored
	d := tr.Sample(time.Unix(0, 0)).SubRequests["a/x"]
	if len(d.Weights) != last+1 || d.Weights[0] != 0.25 || d.Weights[2] != 0.5 || d.Weights[last] != 0.25 ||
		d.TailMean != 70 {
		t.Errorf("distribution %v (tail mean %v), want 0.25, 0.5 at 2, 0.25 in the tail of mean 70", d.Weights[:3],
			d.TailMean)
	}
	tr.Fold("a/x", wire.FanoutCounts{Items: 80, Children: map[string]uint64{"b": 80}, SubRequests: []uint64{0, 80}})
	d = tr.Sample(time.Unix(0, 0)).SubRequests["a/x"]
	// 120 items weigh over 100: halved, the shares stay (10, 80, 20, 10 of 120).
	if got := d.Weights[1]; math.Abs(got-80.0/120) > 1e-12 || d.TailMean != 70 {
		t.Errorf("after 80 items of one sub-request: share %v (tail mean %v), want 2/3 (70)", got, d.TailMean)
	}
	if tr.subs["a/x"].weights[1] != 40 {
		t.Errorf("weights %v: want the counts halved past MaxItems", tr.subs["a/x"].weights[:3])
	}
}

// TestCountersFoldSubRequests: the heartbeat's histogram is folded into differences like the other counters, and a
// malformed one gives none.
func TestCountersFoldSubRequests(t *testing.T) {
	c := NewCounters()
	beat := func(h []uint64) wire.Registration {
		return wire.Registration{Observed: map[string]wire.Observed{"p:a/x": {FanoutCounts: wire.FanoutCounts{
			Items: 100, SubRequests: h}}}}
	}
	c.Fold("w", beat([]uint64{1, 2}))
	if d := c.Fold("w", beat([]uint64{3, 2, 5}))["p:a/x"]; !slices.Equal(d.SubRequests, []uint64{2, 0, 5}) {
		t.Errorf("difference %v, want [2 0 5]", d.SubRequests)
	}
	if d := c.Fold("w", beat(make([]uint64, wire.MaxSubRequestBuckets+1)))["p:a/x"]; d.SubRequests != nil {
		t.Errorf("an oversized histogram gave %d entries, want none", len(d.SubRequests))
	}
}

// TestGaps: a frontend's gaps between arrivals, the newest wire.MaxDemandGaps of them oldest first; a Take starts
// anew, the next gap measured from the last arrival.
func TestGaps(t *testing.T) {
	var g Gaps
	t0 := time.Unix(100, 0)
	n := wire.MaxDemandGaps + 5
	for i := range n + 1 {
		g.Note(t0.Add(time.Duration(i*i) * time.Millisecond)) // gap i: 2i-1 ms
	}
	got := g.Take()
	if len(got) != wire.MaxDemandGaps || got[0] != float32(2*(n-wire.MaxDemandGaps+1)-1) || got[len(got)-1] != float32(2*n-1) {
		t.Errorf("%d gaps from %v to %v, want the newest %d, %d ms to %d ms", len(got), got[0], got[len(got)-1],
			wire.MaxDemandGaps, 2*(n-wire.MaxDemandGaps+1)-1, 2*n-1)
	}
	g.Note(t0.Add(time.Duration(n*n)*time.Millisecond + 7*time.Millisecond))
	if got := g.Take(); !slices.Equal(got, []float32{7}) {
		t.Errorf("after a Take: %v, want [7]", got)
	}
}

// TestTrafficGapsTrimmedBeforeGrowing: a frontend's gaps cost one new array of twice MaxGaps per MaxGaps gaps (a
// trim copies, so that a sample may share the old array), not also a doubled array before each trim: 16 bytes a
// gap, where it was 37.
func TestTrafficGapsTrimmedBeforeGrowing(t *testing.T) {
	tr := NewTraffic()
	gaps := make([]float32, wire.MaxDemandGaps) // a frontend's report of a busy second
	for i := range gaps {
		gaps[i] = 1
	}
	observe := func(reports int) {
		for range reports {
			if err := tr.Observe(wire.DemandReport{Frontend: "f", GapsMs: gaps}, time.Unix(100, 0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	observe(4 * tr.MaxGaps / len(gaps)) // past the first trims
	reports := 32 * tr.MaxGaps / len(gaps)
	perGap := float64(alloctest.Bytes(func() { observe(reports) })) / float64(reports*len(gaps))
	t.Logf("%.1f bytes allocated a gap", perGap)
	if perGap > 24 {
		t.Fatalf("%.1f bytes allocated a gap: want 16 (a new array of 2*MaxGaps per MaxGaps gaps)", perGap)
	}
}
