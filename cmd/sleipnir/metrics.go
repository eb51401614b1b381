package main

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
)

// metricsFlag is where a service serves its Prometheus metrics.
func metricsFlag(fs *flag.FlagSet, def string) *string {
	return fs.String("metrics-addr", envOr("SLEIPNIR_METRICS_ADDR", def), "address of the Prometheus endpoint "+
		metrics.Path+" (empty disables it; env SLEIPNIR_METRICS_ADDR)")
}

// serveMetrics starts a service's metrics endpoint at addr: the registry to register with (nil when addr is empty:
// no metrics) and a function that stops it.
func serveMetrics(addr string, log *slog.Logger) (prometheus.Registerer, func(), error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	reg := metrics.NewRegistry()
	srv, err := metrics.Listen(addr, reg)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	log.Info("metrics", "url", "http://"+srv.Addr()+metrics.Path)
	return reg, func() { _ = srv.Close() }, nil
}

// DefaultUpMetricsAddr is where `up` serves its metrics by default (the port of OpenTelemetry's Prometheus exporter).
const DefaultUpMetricsAddr = "127.0.0.1:9464"
