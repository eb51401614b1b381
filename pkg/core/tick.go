// The once-a-second step: estimates, control loops, and what was published.

package core

import (
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/latency"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TickEvery is how often the caller ticks: the frontends report and the workers beat about once a second.
const TickEvery = time.Second

// Decision is what a tick decided for one pipeline: the control loop's step (a plan to publish, or none) and what
// it was decided from.
type Decision struct {
	Pipeline *Pipeline
	Observed control.Observed
	control.Step
}

// Tick folds what was reported since the previous tick into the estimates and runs every pipeline's control loop
// (pkg/control) with its share of the able workers (per server class, with the classes' prices; plan.Uniform(n)
// for n workers of one kind). The caller publishes each decision's Plan (when not nil) and
// calls Published for each one it published, and then, for every pipeline, moves what waits at the variants the
// plan in force retired (plan.Rehome).
func (c *Cluster) Tick(now time.Time, able plan.Cluster) []Decision {
	out := c.observe(now)
	shares := c.divide(out, able)
	for i := range out {
		d := &out[i]
		d.Observed.Servers = shares[i].Total()
		if !shares[i].Classless() || shares[i].Priced() { // else the loop plans on a bare count, as before classes
			d.Observed.Cluster = shares[i]
		}
		d.Step = d.Pipeline.loop.Next(now, d.Observed)
	}
	return out
}

// observe folds the reports since the previous tick into each pipeline's estimates.
func (c *Cluster) observe(now time.Time) []Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.messages.Tick()
	out := make([]Decision, len(c.pipes))
	for i, p := range c.pipes {
		p.fanout.Tick()
		p.escal.Tick()
		before := p.demand.Estimate()
		est := p.demand.Tick(now)
		if est > gapsForgetRatio*before || est*gapsForgetRatio < before {
			p.traffic.ForgetGaps() // those of the load before the step: the plan check replays the one after
		}
		out[i] = Decision{Pipeline: p, Observed: control.Observed{Demand: est, Escalation: p.escalations(),
			DemandWindow: p.demand.Window(), DemandUnknown: !p.demand.Known(), Fanout: p.fanout.Estimate(p.Spec),
			FanoutSamples: p.fanout.Samples(), TaskDemand: p.tasks.Tick(now, TickEvery), Traffic: p.traffic.Sample(now),
			Profiles: latency.Blend(p.Spec, c.latency.Measured(p.Spec, now, c.cfg.LatencyMaxAge))}}
	}
	return out
}

// gapsForgetRatio is how far the demand estimate must move in one tick for the frontends' gaps of the load before
// to be forgotten (demand.Traffic.ForgetGaps). A step of the estimator (a 25% rise) was not enough: Gamma arrivals of
// CV 4 at a steady 600 QPS make such steps every few seconds, and forgetting at each left the allocation a few
// seconds of gaps, too few to see the burstiness (1.7% of TestBurstyArrivalsPlanned's requests missed, against
// under 1%).
const gapsForgetRatio = 2

// Published records that d's plan is in force from now, with able workers. After a new allocation, the tuner looks
// at it at once (with the queues of its last look), so that the workers it lent stay where the plan still wants
// them rather than going back and being lent again; the caller then reassigns the workers (Assign).
func (c *Cluster) Published(d Decision, now time.Time, able plan.Cluster) {
	p := d.Pipeline
	old := p.Current()
	p.loop.Published(d.Step, d.Observed, now)
	if !d.Replanned {
		return
	}
	p.replannedAt = now
	p.cut = cutVariants(old, d.Plan, p.lent)
	if p.tuner != nil {
		p.lent = p.tuner.Look(now, c.tuneInput(p, able))
		c.showLoans()
	}
}

// escalations is the measured escalation rate of each cascade task's first variant seen often enough.
func (p *Pipeline) escalations() map[string]float64 {
	var out map[string]float64
	for _, t := range p.Spec.Cascades() {
		if r, ok := p.escal.Rate(wire.VariantKey{Task: t.Name, Variant: t.Cascade.Variants[0]}.String()); ok {
			if out == nil {
				out = map[string]float64{}
			}
			out[t.Name] = r
		}
	}
	return out
}
