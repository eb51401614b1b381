package variate

import (
	"math"
	"math/rand/v2"
	"testing"
)

// moments draws n counts and returns their mean and variance.
func moments(n int, draw func() float64) (mean, variance float64) {
	var sum, sq float64
	for range n {
		x := draw()
		sum += x
		sq += x * x
	}
	mean = sum / float64(n)
	return mean, sq/float64(n) - mean*mean
}

func TestNegativeBinomialMoments(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ mean, r float64 }{{18, 2.5}, {2, 1.5}, {9, 0.8}, {40, 4}} {
		m, v := moments(200000, func() float64 { return float64(NegativeBinomial(rng, tc.mean, tc.r)) })
		want := tc.mean + tc.mean*tc.mean/tc.r
		if math.Abs(m-tc.mean) > 0.02*tc.mean || math.Abs(v-want) > 0.05*want {
			t.Errorf("NegativeBinomial(%g, %g): mean %.3f variance %.2f, want %g and %.2f", tc.mean, tc.r, m, v, tc.mean, want)
		}
	}
}

func TestPoissonAndGammaMoments(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, mean := range []float64{0.5, 3, 18, 45} {
		m, v := moments(200000, func() float64 { return float64(Poisson(rng, mean)) })
		if math.Abs(m-mean) > 0.02*mean || math.Abs(v-mean) > 0.05*mean {
			t.Errorf("Poisson(%g): mean %.3f variance %.3f", mean, m, v)
		}
	}
	for _, k := range []float64{0.4, 1, 2.5, 9} {
		m, v := moments(200000, func() float64 { return Gamma(rng, k) })
		if math.Abs(m-k) > 0.02*k || math.Abs(v-k) > 0.05*k {
			t.Errorf("Gamma(%g): mean %.3f variance %.3f", k, m, v)
		}
	}
	if Poisson(rng, 0) != 0 || NegativeBinomial(rng, 0, 1) != 0 {
		t.Error("a zero mean drew a positive count")
	}
}
