package worker

import (
	"github.com/nats-io/nats.go/micro"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// addService registers the worker with the NATS micro framework: `nats micro list` shows it, and its status
// endpoint (wire.WorkerStatusSubject) answers with what its heartbeat says. Stop it when the worker stops.
func (w *Worker) addService() (micro.Service, error) {
	svc, err := micro.AddService(w.nc, micro.Config{Name: wire.ServiceWorker, Version: wire.ServiceVersion,
		Description: "Sleipnir worker: serves one model variant at a time", Metadata: map[string]string{"worker": w.cfg.ID}})
	if err != nil {
		return nil, err
	}
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(req micro.Request) {
		_ = req.RespondJSON(w.registration())
	}), micro.WithEndpointSubject(wire.WorkerStatusSubject(w.cfg.ID)),
		micro.WithEndpointPendingLimits(bus.ControlPending.Msgs, bus.ControlPending.Bytes))
	if err != nil {
		_ = svc.Stop()
		return nil, err
	}
	return svc, nil
}
