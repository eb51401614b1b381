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

// TestQuantiles checks the quantiles against the draws: the share of draws at or below a quantile reaches p, and
// the share below it does not.
func TestQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 200000
	check := func(name string, q int, draw func() int, p float64) {
		at, below := 0, 0
		for range n {
			k := draw()
			if k <= q {
				at++
			}
			if k < q {
				below++
			}
		}
		if float64(at)/n < p-0.003 || float64(below)/n > p+0.003 {
			t.Errorf("%s: quantile %d: %.4f of draws at or below, %.4f below, want p = %g between", name, q,
				float64(at)/n, float64(below)/n, p)
		}
	}
	for _, p := range []float64{0.5, 0.9, 0.99} {
		for _, c := range []struct{ mean, r float64 }{{18, 2.5}, {2, 2.5}, {9, 1}} {
			check("negative binomial", NegativeBinomialQuantile(c.mean, c.r, p),
				func() int { return NegativeBinomial(rng, c.mean, c.r) }, p)
		}
		for _, mean := range []float64{0.9, 2.1, 12} {
			check("poisson", PoissonQuantile(mean, p), func() int { return Poisson(rng, mean) }, p)
		}
	}
	if PoissonQuantile(0, 0.99) != 0 || NegativeBinomialQuantile(0, 2, 0.99) != 0 {
		t.Error("a zero mean has a positive quantile")
	}
}
