package demand

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/variate"
)

func TestDispersion(t *testing.T) {
	if d := (*TrafficSample)(nil).Dispersion(); d != 1 {
		t.Errorf("no sample: dispersion %v, want 1", d)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	gaps := func(n int, cv float64) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			k := 1 / (cv * cv) // Gamma of shape k and mean 2 ms has cv 1/sqrt(k)
			out[i] = time.Duration(variate.Gamma(rng, k) / k * float64(2*time.Millisecond))
		}
		return out
	}
	for _, cv := range []float64{1, 2, 4} {
		d := (&TrafficSample{Gaps: [][]time.Duration{gaps(4096, cv)}}).Dispersion()
		if want := cv * cv; math.Abs(d-want) > 0.25*want {
			t.Errorf("gamma gaps of cv %v: dispersion %.2f, want about %.0f", cv, d, want)
		}
	}
	// Two frontends, one Poisson at twice the other's rate: weighted by rate.
	s := &TrafficSample{Gaps: [][]time.Duration{gaps(4096, 1), gaps(4096, 3)}}
	if d := s.Dispersion(); d < 3 || d > 7 {
		t.Errorf("two streams of cv 1 and 3 at one rate: dispersion %.2f, want about 5", d)
	}
	if d := (&TrafficSample{Gaps: [][]time.Duration{gaps(100, 4)}}).Dispersion(); d != 1 {
		t.Errorf("too few gaps: dispersion %v, want 1", d)
	}
}
