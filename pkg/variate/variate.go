// Package variate draws random variates the emulation needs from a caller's seeded source: Gamma (bursty arrivals),
// Poisson and negative binomial (sub-requests per item). Pure: the caller owns the randomness.
package variate

import (
	"math"
	"math/rand/v2"
)

// Gamma draws from Gamma(k, 1) by Marsaglia and Tsang's method (with Stuart's boost below k = 1).
func Gamma(rng *rand.Rand, k float64) float64 {
	if k < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return Gamma(rng, k+1) * math.Pow(u, 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// Poisson draws from a Poisson distribution: Knuth's method for small means, a rounded normal for large ones.
func Poisson(rng *rand.Rand, mean float64) int { return PoissonCount(mean).Draw(rng) }

// Count is a distribution of counts to draw from many times (a variant's fan-out): what a draw needs of its
// parameters is worked out once.
type Count struct {
	kind           uint8 // countFixed, countPoisson or countNegativeBinomial
	fixed          int
	mean, r, limit float64 // limit: Knuth's e^-mean, for a Poisson mean up to 30
}

const (
	countFixed = iota
	countPoisson
	countNegativeBinomial
)

// Fixed is the count n, always.
func Fixed(n int) Count { return Count{kind: countFixed, fixed: n} }

// PoissonCount is the Poisson distribution with this mean (Poisson).
func PoissonCount(mean float64) Count {
	c := Count{kind: countPoisson, mean: mean}
	if mean > 0 && mean <= 30 {
		c.limit = math.Exp(-mean)
	}
	return c
}

// NegativeBinomialCount is NegativeBinomial's distribution with this mean and dispersion r.
func NegativeBinomialCount(mean, r float64) Count {
	return Count{kind: countNegativeBinomial, mean: mean, r: r}
}

// Draw draws a count from c.
func (c Count) Draw(rng *rand.Rand) int {
	switch c.kind {
	case countFixed:
		return c.fixed
	case countNegativeBinomial:
		return NegativeBinomial(rng, c.mean, c.r)
	}
	if c.mean <= 0 {
		return 0
	}
	if c.mean > 30 {
		return max(0, int(math.Round(c.mean+math.Sqrt(c.mean)*rng.NormFloat64())))
	}
	p, k := 1.0, 0
	for {
		p *= rng.Float64()
		if p <= c.limit {
			return k
		}
		k++
	}
}

// NegativeBinomial draws a count with the given mean and dispersion r > 0: variance mean + mean^2/r, so a smaller
// r spreads the counts more (busy and empty traffic scenes), and r -> infinity is Poisson. Drawn as a Poisson
// whose mean is Gamma(r, mean/r): the number of objects in a scene whose busyness varies.
func NegativeBinomial(rng *rand.Rand, mean, r float64) int {
	if mean <= 0 {
		return 0
	}
	return Poisson(rng, Gamma(rng, r)*mean/r)
}

// PoissonPMF is the probability of count k under a Poisson distribution with this mean.
func PoissonPMF(mean float64, k int) float64 {
	if mean <= 0 {
		return b2f(k == 0)
	}
	return math.Exp(float64(k)*math.Log(mean) - mean - lgamma(float64(k)+1))
}

// NegativeBinomialPMF is the probability of count k under NegativeBinomial's distribution with this mean and
// dispersion r.
func NegativeBinomialPMF(mean, r float64, k int) float64 {
	if mean <= 0 {
		return b2f(k == 0)
	}
	q := r / (r + mean) // the chance of "success" in the classic form: pmf(k) = C(k+r-1, k) q^r (1-q)^k
	kf := float64(k)
	return math.Exp(lgamma(kf+r) - lgamma(r) - lgamma(kf+1) + r*math.Log(q) + kf*math.Log1p(-q))
}

// PoissonQuantile is the least count whose Poisson cumulative probability reaches p.
func PoissonQuantile(mean, p float64) int {
	return quantile(p, func(k int) float64 { return PoissonPMF(mean, k) }, mean)
}

// NegativeBinomialQuantile is the least count whose cumulative probability reaches p under NegativeBinomial's
// distribution with this mean and dispersion r.
func NegativeBinomialQuantile(mean, r, p float64) int {
	return quantile(p, func(k int) float64 { return NegativeBinomialPMF(mean, r, k) }, mean)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// quantile sums pmf from 0 until it reaches p (or the mass left is negligible).
func quantile(p float64, pmf func(k int) float64, mean float64) int {
	if mean <= 0 || p <= 0 {
		return 0
	}
	sum := 0.0
	for k := 0; ; k++ {
		sum += pmf(k)
		if sum >= p || (float64(k) > mean && 1-sum < 1e-12) {
			return k
		}
	}
}

func lgamma(x float64) float64 {
	v, _ := math.Lgamma(x)
	return v
}
