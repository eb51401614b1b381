// What the core hears: the frontends' demand reports and the workers' heartbeats.

package core

import (
	"fmt"
	"math"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Report takes a frontend's demand report for a pipeline: its count of requests over its interval, and the gaps
// between its recent arrivals (the plan check's arrivals, and the newest ones' rate at a step:
// demand.Estimator.Newest). Stepped says the report made a step of the estimate, or replaces a provisional one
// (demand.Estimator.Stepped): the caller ticks at once rather than at the next second.
func (c *Cluster) Report(pipeline string, r wire.DemandReport, now time.Time) (stepped bool, err error) {
	p := c.named[pipeline]
	if p == nil {
		return false, fmt.Errorf("no pipeline %q", pipeline)
	}
	interval := time.Duration(r.IntervalMs * float64(time.Millisecond))
	if math.IsNaN(r.IntervalMs) || math.IsInf(r.IntervalMs, 0) {
		interval = 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := p.demand.Observe(r.Frontend, r.Count, interval, now); err != nil {
		return false, err
	}
	if err := p.traffic.Observe(r, now); err != nil {
		return false, err
	}
	p.demand.Newest(r.Frontend, r.GapsMs, func() float64 { return p.traffic.DispersionOf(r.Frontend) })
	return p.demand.Stepped(now), nil
}

// Grace says the reports of the last while may have been lost on the way (the planner's connection was down):
// the demand estimates do not count their absence as a fall (demand.Estimator.Grace).
func (c *Cluster) Grace(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pipes {
		p.demand.Grace(now)
	}
}

// Heartbeat takes worker id's heartbeat: what its variants executed and emitted since its previous one goes to the
// multiplicative-factor, per-task and message-size estimates, and the latencies it measured to the board.
func (c *Cluster) Heartbeat(id string, reg wire.Registration, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, delta := range c.counters.Fold(id, reg) {
		if delta.Items == 0 && delta.Messages == 0 && len(delta.Children) == 0 {
			continue // nothing to fold (a heartbeat of latencies alone): no key to parse
		}
		served, err := wire.ParseServedKey(key)
		p := c.named[served.Pipeline]
		if err != nil || p == nil {
			continue
		}
		variant := served.Key().String()
		p.fanout.Observe(variant, delta.FanoutCounts)
		p.escal.Observe(variant, delta.Items, delta.Escalated)
		c.messages.Observe(key, delta)
		if delta.Items > 0 {
			p.traffic.Fold(variant, delta.FanoutCounts)
		}
		if t := p.Spec.Task(served.Task); t != nil && delta.Items > 0 {
			for _, child := range t.Children {
				p.tasks.Add(child, delta.Children[child])
			}
		}
	}
	c.latency.Set(id, now, reg.Observed)
}

// Latencies takes a heartbeat of worker id that carries measured latencies and no counts, as Heartbeat takes it:
// with nothing to fold, the counts are left alone (the simulator's servers, whose counts one heartbeat of all
// carries).
func (c *Cluster) Latencies(id string, observed map[string]wire.Observed, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latency.Set(id, now, observed)
}

// Forget drops what the core kept of a worker that is gone: if it comes back, it counts from zero.
func (c *Cluster) Forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counters.Forget(id)
	c.latency.Forget(id)
}

// Workers is how many workers' heartbeats the core keeps (for the tests that check a gone worker is forgotten).
func (c *Cluster) Workers() (counted, measured int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counters.Workers(), c.latency.Workers()
}

// Traffic is what p's frontends and workers reported of its traffic (the plan check's input), as of now.
func (c *Cluster) Traffic(p *Pipeline, now time.Time) *demand.TrafficSample {
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.traffic.Sample(now)
}
