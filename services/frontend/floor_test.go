package frontend

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/internal/testrig"
	"github.com/sleipnir-serving/sleipnir/pkg/admission"
	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/planner"
	"github.com/sleipnir-serving/sleipnir/services/worker"
)

// TestFloorShortfallRefused: the real planner (loki) on the traffic example with min_accuracy 0.40, on 3 workers, at
// 100 QPS (reported by another frontend): it serves about 38 at the floor, and its plan says so; a frontend with
// admission control refuses at once the share it cannot serve (429, reason accuracy, in
// sleipnir_frontend_admission_refusals_total) and sends the others in.
func TestFloorShortfallRefused(t *testing.T) {
	spec, err := pipeline.Load("../../examples/traffic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec.MinAccuracy = 0.40
	s := &testSystem{srv: testrig.Server(t), spec: spec, log: slog.New(slog.DiscardHandler)}
	pl, err := planner.New(s.connect(t, "planner"), planner.Config{Pipelines: []*pipeline.Spec{spec},
		Storage: jetstream.MemoryStorage, Logger: s.log})
	if err != nil {
		t.Fatal(err)
	}
	testrig.Run(t, "planner", pl.Run)
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("w%02d", i)
		w, err := worker.New(s.connect(t, id), worker.Config{ID: id, Logger: s.log})
		if err != nil {
			t.Fatal(err)
		}
		testrig.Run(t, "worker "+id, w.Run)
	}
	reportDemand(t, s.connect(t, "elsewhere"), spec.Name, 100)
	reg := prometheus.NewRegistry()
	f, _ := s.startFrontend(t, Config{ID: "gated", Metrics: metrics.NewFrontend(reg)})
	var share float64
	testrig.Eventually(t, 20*time.Second, "a plan short of the floor", func() bool {
		_, p := f.lookup(spec.Name)
		share = 1
		if p != nil {
			share = p.FloorShare()
		}
		return share < 1
	})
	srv := httptest.NewServer(f.Handler())
	defer srv.Close()
	const n = 40
	refused := 0
	for range n {
		code, body := postInfer(t, srv.URL+"/v2/models/"+spec.Name+"/infer")
		if code == http.StatusTooManyRequests && strings.Contains(body, "accuracy floor") {
			refused++
		}
	}
	t.Logf("the plan serves %.1f%% of the demand at the floor; %d of %d refused", 100*share, refused, n)
	if want := float64(n) * (1 - share); math.Abs(float64(refused)-want) > 2 {
		t.Errorf("%d of %d refused at the floor, want %.1f", refused, n, want)
	}
	if got := refusals(t, reg, admission.ReasonAccuracy); got != float64(refused) {
		t.Errorf("admission refusals{reason=accuracy} %v, want %d", got, refused)
	}
}

// reportDemand publishes, as another frontend, qps requests a second of pipeline's demand until the test ends.
func reportDemand(t *testing.T, nc *nats.Conn, pipelineName string, qps float64) {
	testrig.Run(t, "demand reports", func(ctx context.Context) error {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			data, _ := msgpack.Marshal(&wire.DemandReport{Frontend: "elsewhere", Count: int(qps / 5),
				IntervalMs: 200})
			if err := nc.Publish(wire.DemandSubject(pipelineName), data); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
	})
}

// refusals is the frontend's sleipnir_frontend_admission_refusals_total for reason, over pipelines and classes.
func refusals(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, fam := range families {
		if fam.GetName() != "sleipnir_frontend_admission_refusals_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}
