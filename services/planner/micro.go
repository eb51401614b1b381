package planner

import (
	"encoding/json"

	"github.com/nats-io/nats.go/micro"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Status is what the planner's status endpoint answers.
type Status struct {
	// Plans are the plans in force, as published (the KV bucket's values).
	Plans map[string]json.RawMessage `json:"plans"`
	// DemandQPS is the demand estimate per pipeline.
	DemandQPS map[string]float64 `json:"demand_qps"`
}

// addService registers the planner with the NATS micro framework: `nats micro list` shows it, and its status
// endpoint (wire.PlannerStatusSubject) answers with the plans in force and the demand estimates.
func (p *Planner) addService() (micro.Service, error) {
	svc, err := micro.AddService(p.nc, micro.Config{Name: wire.ServicePlanner, Version: wire.ServiceVersion,
		Description: "Sleipnir planner: plans per pipeline, workers assigned to them"})
	if err != nil {
		return nil, err
	}
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(req micro.Request) { _ = req.RespondJSON(p.status()) }),
		micro.WithEndpointSubject(wire.PlannerStatusSubject()),
		micro.WithEndpointPendingLimits(bus.ControlPending.Msgs, bus.ControlPending.Bytes))
	if err != nil {
		_ = svc.Stop()
		return nil, err
	}
	return svc, nil
}

func (p *Planner) status() Status {
	st := Status{Plans: map[string]json.RawMessage{}, DemandQPS: map[string]float64{}}
	p.published.Range(func(k, v any) bool {
		st.Plans[k.(string)] = v.([]byte)
		return true
	})
	st.DemandQPS = p.core.Demand()
	return st
}
