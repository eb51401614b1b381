package wire

import (
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestDemandReportGaps: the gaps a report carries are refused when there are more than MaxDemandGaps or one is not
// a finite time >= 0; the most a frontend sends stays within the planner's 1 KiB a report.
func TestDemandReportGaps(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		gaps []float32
		want string
	}{
		{[]float32{1.5, 0, 3}, ""},
		{make([]float32, MaxDemandGaps+1), "129 gaps"},
		{[]float32{1, -0.5}, "gap -0.5"},
		{[]float32{nan}, "gap NaN"},
		{[]float32{inf}, "gap +Inf"},
	} {
		r := DemandReport{Frontend: "f", Count: 3, GapsMs: tc.gaps}
		got, err := r.Gaps()
		switch {
		case tc.want == "" && (err != nil || len(got) != len(tc.gaps)):
			t.Errorf("%v: %v, %v", tc.gaps, got, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || got != nil):
			t.Errorf("%d gaps: %v, error %v, want one containing %q", len(tc.gaps), got, err, tc.want)
		}
	}
	full := DemandReport{Frontend: strings.Repeat("f", 64), Count: 1 << 30, IntervalMs: 1000.25,
		GapsMs: make([]float32, MaxDemandGaps)}
	for i := range full.GapsMs {
		full.GapsMs[i] = 1.0 / 3
	}
	if data, err := msgpack.Marshal(&full); err != nil || len(data) > 1<<10 {
		t.Errorf("the largest report takes %d bytes (%v), want at most 1 KiB", len(data), err)
	}
}

// TestSubRequestHistogram: an item counts in the bucket of its sub-requests, the last bucket taking the rest, and
// a histogram longer than MaxSubRequestBuckets is refused.
func TestSubRequestHistogram(t *testing.T) {
	var c FanoutCounts
	for _, k := range []int{0, 2, 2, MaxSubRequestBuckets + 40} {
		c.CountSubRequests(k)
	}
	got, err := c.SubRequestBuckets()
	if err != nil || len(got) != MaxSubRequestBuckets || got[0] != 1 || got[2] != 2 || got[MaxSubRequestBuckets-1] != 1 {
		t.Errorf("histogram %v, %v", got, err)
	}
	c.SubRequests = make([]uint64, MaxSubRequestBuckets+1)
	if got, err := c.SubRequestBuckets(); err == nil || got != nil {
		t.Errorf("a histogram of %d entries: %v, %v; want an error", len(c.SubRequests), got, err)
	}
}
