// Package metrics defines Sleipnir's Prometheus metrics: names, help, labels and buckets, and the collectors that
// read the services' own counters at scrape time (worker heartbeats, frontend counters, the planner's plans). It
// holds no NATS: the services hand it what they already count. Names follow Prometheus's conventions (base units in
// the name, _total for counters) and labels are bounded: pipeline, task, variant, status, reason, never a request id.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every Sleipnir metric.
const Namespace = "sleipnir"

// Path is where the metrics are served.
const Path = "/metrics"

// NewRegistry is a registry with the Go runtime's and the process's collectors.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Server serves a registry's metrics over HTTP.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen serves g on addr (host:port; port 0 picks one) at Path, until Close.
func Listen(addr string, g prometheus.Gatherer) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(Path, promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	s := &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = ln.Close()
		}
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops serving.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// Label names.
const (
	LabelPipeline = "pipeline"
	LabelTask     = "task"
	LabelVariant  = "variant"
	LabelStatus   = "status"
	LabelReason   = "reason"
	LabelClass    = "class" // a priority class, 0-9
	LabelChild    = "child"
	LabelMode     = "mode"
	LabelOutcome  = "outcome" // what became of a solve's plan (control.Solve*)
	// LabelServerClass is a server class (wire.DefaultClass, or a class workers declare; docs/classes.md).
	LabelServerClass = "server_class"
)

// LatencyBuckets (seconds) span a few milliseconds to a few SLOs: pipelines' SLOs are 100 ms to a few seconds.
var LatencyBuckets = []float64{.005, .01, .025, .05, .075, .1, .15, .2, .3, .4, .5, .75, 1, 1.5, 2, 3, 5, 10}

// BatchSizeBuckets are the batch sizes profiles are taken at.
var BatchSizeBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128}

func name(subsystem, n string) string { return prometheus.BuildFQName(Namespace, subsystem, n) }
