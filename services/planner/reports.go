// What the planner hears from the frontends: their demand reports.

package planner

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// DefaultDemandBacklog is the default of Config.DemandBacklog per pipeline: a second's reports of a thousand
// frontends, each reporting every pipeline once a second.
const DefaultDemandBacklog = 1024

// maxDemandReportBytes is what a demand report takes at most (a frontend id, a count, an interval and up to
// wire.MaxDemandGaps gaps: about 700 bytes in msgpack), for the subscription's byte limit.
const maxDemandReportBytes = 1 << 10

// demandLimits bound the demand reports waiting for onDemand, which takes the planner's lock: reports pile up while
// a plan is being published.
func (p *Planner) demandLimits() bus.Limits {
	return bus.Limits{Msgs: p.cfg.DemandBacklog, Bytes: p.cfg.DemandBacklog * maxDemandReportBytes}
}

func (p *Planner) onDemand(m *nats.Msg) {
	name := strings.TrimPrefix(m.Subject, wire.DemandPrefix)
	var r wire.DemandReport
	if err := wire.UnmarshalMsgpack(m.Data, &r); err != nil {
		p.complaints.Warn(complainReport, "pipeline", name, "err", err)
		return
	}
	if !wire.ValidName(r.Frontend) {
		p.complaints.Warn(complainReport, "pipeline", name, "err", fmt.Sprintf("frontend id %q", r.Frontend))
		return
	}
	if hook := p.beforeReport.Load(); hook != nil {
		(*hook)()
	}
	stepped, err := p.core.Report(name, r, time.Now())
	if stepped {
		select {
		case p.stepped <- struct{}{}:
		default:
		}
	}
	if err != nil {
		p.complaints.Warn(complainReport, "pipeline", name, "frontend", r.Frontend, "err", err)
	}
}

// spec is the spec of a pipeline the planner serves; nil otherwise.
func (p *Planner) spec(name string) *pipeline.Spec {
	for _, s := range p.cfg.Pipelines {
		if s.Name == name {
			return s
		}
	}
	return nil
}
