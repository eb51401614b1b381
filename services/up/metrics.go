package up

import (
	"fmt"

	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
)

// serviceMetrics are the metrics of every service the process runs, on one registry and one endpoint.
type serviceMetrics struct {
	server   *metrics.Server
	planner  *metrics.Planner
	frontend *metrics.Frontend
	worker   *metrics.Worker
}

// startMetrics serves the metrics at cfg.MetricsAddr; with none, every service runs without metrics.
func (s *System) startMetrics() error {
	if s.cfg.MetricsAddr == "" {
		return nil
	}
	reg := metrics.NewRegistry()
	srv, err := metrics.Listen(s.cfg.MetricsAddr, reg)
	if err != nil {
		return fmt.Errorf("up: metrics on %s: %w", s.cfg.MetricsAddr, err)
	}
	s.metrics = serviceMetrics{server: srv, frontend: metrics.NewFrontend(reg), worker: metrics.NewWorker(reg)}
	s.registry = reg
	s.MetricsAddr = srv.Addr()
	s.cfg.Logger.Info("metrics", "url", "http://"+srv.Addr()+metrics.Path)
	return nil
}
