package ramsis

import (
	"math"
	"math/rand/v2"
	"time"
)

// arrivalDraws is how many inter-arrival times the distribution on the grid is estimated from; drawn from a fixed
// seed, so that a policy is a function of its model (and the cache may hand it to any caller).
const arrivalDraws = 1 << 15

// interArrivals is the distribution of the time to the next arrival in grid steps: p[k] the weight of draining k
// steps. Each draw's fraction of a step is split between the steps either side (so the mean drain is exact);
// draws past the grid drain it all (the last point). Times between arrivals are Gamma distributed with mean
// 1/rate and coefficient of variation cv (cv 1: exponential, Poisson arrivals), the arrival model of sim --cv and
// loadgen --cv.
func interArrivals(rate, cv float64, step time.Duration, points int) []float64 {
	p := make([]float64, points)
	rng := rand.New(rand.NewPCG(0x5a4d, 0x1e))
	shape := 1 / (cv * cv)
	scale := 1 / (rate * shape) // seconds
	unit := step.Seconds()
	w := 1.0 / arrivalDraws
	for range arrivalDraws {
		x := gammaDraw(rng, shape) * scale / unit
		if x >= float64(points-1) {
			p[points-1] += w
			continue
		}
		k := int(x)
		f := x - float64(k)
		p[k] += w * (1 - f)
		p[k+1] += w * f
	}
	return p
}

// gammaDraw is a Gamma(shape, 1) draw (Marsaglia and Tsang; shape < 1 boosted by U^(1/shape)).
func gammaDraw(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		return gammaDraw(rng, shape+1) * math.Pow(1-rng.Float64(), 1/shape)
	}
	d := shape - 1.0/3
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
