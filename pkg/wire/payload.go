package wire

import (
	"fmt"
	"math"
)

// Payloads are msgpack (github.com/vmihailenco/msgpack/v5). Tensors carry their data as raw little-endian bytes.

// Tensor is one named input or output. Data holds the elements in row-major order, little-endian; for BYTES, each
// element is a 4-byte little-endian length followed by that many bytes (as in the KServe v2 binary extension).
type Tensor struct {
	Name     string  `msgpack:"name" json:"name"`
	Datatype string  `msgpack:"datatype" json:"datatype"`
	Shape    []int64 `msgpack:"shape" json:"shape"`
	Data     []byte  `msgpack:"data" json:"-"`
}

// InferRequest is what a client sends to InferSubject (msgpack, or JSON in the KServe v2 shape).
type InferRequest struct {
	ID     string   `msgpack:"id,omitempty" json:"id,omitempty"`
	Inputs []Tensor `msgpack:"inputs" json:"inputs"`
}

// InferReply is the frontend's one reply to a request.
type InferReply struct {
	ID        string  `msgpack:"id,omitempty" json:"id,omitempty"` // the client's id, echoed
	RequestID string  `msgpack:"request_id" json:"request_id"`
	Pipeline  string  `msgpack:"pipeline" json:"pipeline"`
	Status    string  `msgpack:"status" json:"status"`
	Error     string  `msgpack:"error,omitempty" json:"error,omitempty"`
	LatencyMs float64 `msgpack:"latency_ms" json:"latency_ms"`
	// Accuracy is the profiled end-to-end accuracy of what was served: the mean, weighted by item weight, of the
	// path accuracies of the leaves that finished (0 when none did).
	Accuracy float64      `msgpack:"accuracy" json:"accuracy"`
	Results  []ItemResult `msgpack:"results" json:"results"`
	// TraceID is the request's OpenTelemetry trace id (32 hex digits), also in HeaderTraceID; absent on a refusal.
	TraceID string `msgpack:"trace_id,omitempty" json:"trace_id,omitempty"`
}

// TaskMessage is the payload on a variant subject: items of one parent item going to one variant.
type TaskMessage struct {
	Items []Item `msgpack:"items"`
}

// Item is one unit of work. Weight is 1/Den of its request: the root has Den 1 and a parent of Den d that emits k
// sub-requests gives each Den d*k, so the frontend knows a request is complete when the weights of its reported
// leaves sum to 1, whatever order they arrive in.
type Item struct {
	ID     string   `msgpack:"id"`
	Den    uint64   `msgpack:"den"`
	Inputs []Tensor `msgpack:"inputs"`
	// Gear is the threshold a cascade's first variant sent the item on at, when a gear chose it (pkg/gears; 0: the
	// plan's): its leaf is counted at that gear's level.
	Gear float64 `msgpack:"gear,omitempty"`
}

// ResultMessage is what a worker sends to a frontend's ResultSubject: leaves that finished, were dropped or failed.
// Error, when set, fails the whole request at once (a task message of it was set aside: its items may not even be
// readable, so no leaf can be reported for them); the frontend answers it `error` with this text.
type ResultMessage struct {
	RequestID string       `msgpack:"request_id"`
	Items     []ItemResult `msgpack:"items"`
	Error     string       `msgpack:"error,omitempty"`
}

// ItemResult is one leaf of a request's tree of items.
type ItemResult struct {
	ID      string   `msgpack:"id" json:"id"`
	Den     uint64   `msgpack:"den" json:"-"`
	Path    []string `msgpack:"path" json:"path"` // "task/variant" hops this item went through
	Status  string   `msgpack:"status" json:"status"`
	Reason  string   `msgpack:"reason,omitempty" json:"reason,omitempty"`
	Outputs []Tensor `msgpack:"outputs,omitempty" json:"outputs,omitempty"`
	// Gear is the threshold its cascade ran at when a gear chose it (Item.Gear; 0: the plan's).
	Gear float64 `msgpack:"gear,omitempty" json:"-"`
}

// DemandReport is what a frontend sends to DemandSubject every interval: the requests it counted as demand in that
// interval, accepted or refused by admission control.
type DemandReport struct {
	Frontend   string  `msgpack:"frontend"`
	Count      int     `msgpack:"count"`
	IntervalMs float64 `msgpack:"interval_ms"`
	// GapsMs are the times between the consecutive requests it counted (accepted, or refused by admission control),
	// newest last, at most MaxDemandGaps (the newest): the planner's plan check replays them (pkg/demand.Traffic),
	// and a step of the demand estimate is taken at their rate (pkg/demand.Estimator.Newest). Read them with Gaps.
	GapsMs []float32 `msgpack:"gaps_ms,omitempty"`
}

// MaxDemandGaps bounds DemandReport.GapsMs: 128 float32s keep a report under 1 KiB, the planner's bound per report.
const MaxDemandGaps = 128

// Gaps checks GapsMs: more than MaxDemandGaps, or a gap that is not a finite number of milliseconds >= 0, is an
// error (the report's count still stands).
func (r *DemandReport) Gaps() ([]float32, error) {
	if len(r.GapsMs) > MaxDemandGaps {
		return nil, fmt.Errorf("demand report: %d gaps, want at most %d", len(r.GapsMs), MaxDemandGaps)
	}
	for _, g := range r.GapsMs {
		if !(g >= 0) || math.IsInf(float64(g), 0) {
			return nil, fmt.Errorf("demand report: gap %v ms: want a finite time >= 0", g)
		}
	}
	return r.GapsMs, nil
}
