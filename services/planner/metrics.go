package planner

import (
	"context"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// queueLookupTimeout bounds the JetStream lookups of one scrape.
const queueLookupTimeout = 2 * time.Second

// metricsState is what the planner's metrics read at scrape time: the demand estimates and, from JetStream, what
// waits at each variant's consumer.
func (p *Planner) metricsState() metrics.PlannerState {
	st := metrics.PlannerState{Demand: map[string]float64{}, SLO: map[string]float64{}}
	for _, spec := range p.cfg.Pipelines {
		st.SLO[spec.Name] = spec.SLOMs / 1000
	}
	st.Demand = p.core.Demand()
	st.Lent = p.core.Loans()
	p.mu.Lock()
	st.FailingWorkers = p.failingShown
	p.mu.Unlock()
	st.DroppedReports = p.droppedReports.Total()
	ctx, cancel := context.WithTimeout(context.Background(), queueLookupTimeout)
	defer cancel()
	for _, spec := range p.cfg.Pipelines {
		stream, err := p.js.Stream(ctx, wire.TaskStream(spec.Name))
		if err != nil {
			continue // not made yet, or JetStream is away: no series rather than a wrong zero
		}
		consumers := stream.ListConsumers(ctx)
		for info := range consumers.Info() {
			k, err := wire.ParseTaskSubject(info.Config.FilterSubject)
			if err != nil || k.Pipeline != spec.Name {
				continue
			}
			st.Queues = append(st.Queues, metrics.QueueDepth{Pipeline: spec.Name, Task: k.Task, Variant: k.Variant,
				Pending: info.NumPending, Unacked: uint64(info.NumAckPending)})
		}
	}
	return st
}
