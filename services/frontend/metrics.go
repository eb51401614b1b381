package frontend

import (
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
)

// exportCounters hands the frontend's counters to its metrics (Config.Metrics), read at scrape time.
func (f *Frontend) exportCounters() {
	f.cfg.Metrics.AddSource(func() metrics.FrontendCounts {
		s := f.Stats()
		return metrics.FrontendCounts{Accepted: s.Accepted, Refused: s.Refused, Overloaded: s.Overloaded, Late: s.Late,
			StrayLeaves: s.StrayLeaves, ExecutedItems: s.ExecutedItems, DroppedWorkItems: s.DroppedWorkItems, BadReports: s.BadReports, ReplyFailures: s.ReplyFailures,
			DroppedRequests: s.DroppedRequests, DroppedResults: s.DroppedResults, DroppedControl: s.DroppedControl,
			JoinFailures: s.JoinFailures}
	})
}

// pipelineLabel is a request's pipeline as a metric label: a name no spec has is the client's choice, unbounded, so
// it is counted under metrics.UnknownPipeline.
func (f *Frontend) pipelineLabel(name string) string {
	if f.catalog != nil {
		if spec, _ := f.lookup(name); spec != nil {
			return name
		}
	}
	return metrics.UnknownPipeline
}

// measureReply records the reply to an accepted request.
func (f *Frontend) measureReply(r *request, status string, accuracy float64) {
	if f.cfg.Metrics != nil {
		f.cfg.Metrics.Replied(r.pipeline, status, time.Since(r.start).Seconds(), accuracy)
	}
}

// measureRefusal records the reply (status error or overloaded) to a request that never entered a pipeline.
func (f *Frontend) measureRefusal(pipelineName, status string) {
	if f.cfg.Metrics != nil {
		f.cfg.Metrics.Refused(f.pipelineLabel(pipelineName), status)
	}
}
