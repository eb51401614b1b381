package frontend

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestHTTPStatus is the mapping from what became of a request to its HTTP status, as README.md and docs/http.md
// table it.
func TestHTTPStatus(t *testing.T) {
	for _, tc := range []struct {
		what  string
		rep   *wire.InferReply
		err   error
		code  int
		retry bool
	}{
		{"ok", &wire.InferReply{Status: wire.StatusOK}, nil, http.StatusOK, false},
		{"degraded: every leaf answered in time", &wire.InferReply{Status: wire.StatusDegraded}, nil, http.StatusOK, false},
		{"partial: some leaves dropped or failed", &wire.InferReply{Status: wire.StatusPartial}, nil, http.StatusServiceUnavailable, true},
		{"dropped", &wire.InferReply{Status: wire.StatusDropped}, nil, http.StatusServiceUnavailable, true},
		{"late", &wire.InferReply{Status: wire.StatusLate}, nil, http.StatusGatewayTimeout, false},
		{"every leaf failed in its model", &wire.InferReply{Status: wire.StatusError}, nil, http.StatusUnprocessableEntity, false},
		{"failed by the frontend (shutting down)", &wire.InferReply{Status: wire.StatusError, Error: "the frontend is shutting down"}, nil, http.StatusServiceUnavailable, true},
		{"bad request", nil, refuse(ErrBadRequest, "x"), http.StatusBadRequest, false},
		{"too large", nil, refuse(ErrTooLarge, "x"), http.StatusRequestEntityTooLarge, false},
		{"unknown pipeline", nil, refuse(ErrUnknownPipeline, "x"), http.StatusNotFound, false},
		{"overloaded", nil, refuse(ErrOverloaded, "x"), http.StatusTooManyRequests, true},
		{"reply overloaded", &wire.InferReply{Status: wire.StatusOverloaded}, nil, http.StatusTooManyRequests, true},
		{"unavailable", nil, refuse(ErrUnavailable, "x"), http.StatusServiceUnavailable, true},
		{"internal", nil, refuse(ErrInternal, "x"), http.StatusInternalServerError, false},
		{"an error of no kind", nil, fmt.Errorf("x"), http.StatusInternalServerError, false},
	} {
		if code, retry := httpStatus(tc.rep, tc.err); code != tc.code || retry != tc.retry {
			t.Errorf("%s: %d (Retry-After %v), want %d (%v)", tc.what, code, retry, tc.code, tc.retry)
		}
	}
}

// TestReplyError: a response that is not ok says why, from its leaves.
func TestReplyError(t *testing.T) {
	rep := &wire.InferReply{Status: wire.StatusPartial, Results: []wire.ItemResult{
		{Status: wire.ItemOK}, {Status: wire.ItemDropped, Reason: wire.DropDeadline},
		{Status: wire.ItemDropped, Reason: wire.DropDeadline}, {Status: wire.ItemError, Reason: "not a PNG"}}}
	if got, want := replyError(rep), "request partial: 2 dropped: deadline, 1 error: not a PNG"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// TestExecutedItems reads what a model executed from a request's leaves: a dropped leaf was not executed, the items
// above every leaf were.
func TestExecutedItems(t *testing.T) {
	leaf := func(id, status string) wire.ItemResult { return wire.ItemResult{ID: id, Status: status} }
	for _, tc := range []struct {
		name   string
		leaves []wire.ItemResult
		want   int
	}{
		{"the root dropped", []wire.ItemResult{leaf("0", wire.ItemDropped)}, 0},
		{"the root alone, finished", []wire.ItemResult{leaf("0", wire.ItemOK)}, 1},
		{"every child dropped", []wire.ItemResult{leaf("0.0", wire.ItemDropped), leaf("0.1", wire.ItemDropped)}, 1},
		{"two of three finished", []wire.ItemResult{leaf("0.0", wire.ItemOK), leaf("0.1", wire.ItemDropped),
			leaf("0.2", wire.ItemOK)}, 3},
		{"grandchildren", []wire.ItemResult{leaf("0.0.0", wire.ItemOK), leaf("0.0.1", wire.ItemDropped),
			leaf("0.1.0", wire.ItemError)}, 5},
		{"nothing reported (late)", nil, 0},
		{"a child answered degraded", []wire.ItemResult{leaf("0.0", wire.ItemDegraded), leaf("0.1", wire.ItemOK)}, 2},
	} {
		if got := executedItems(tc.leaves); got != tc.want {
			t.Errorf("%s: %d executed, want %d", tc.name, got, tc.want)
		}
	}
}
