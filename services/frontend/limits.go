// Bounds on what a frontend holds: requests in flight (admission), and the NATS client's pending buffers of its
// subscriptions. A flood is refused or dropped at the door, never buffered without bound.

package frontend

import "github.com/sleipnir-serving/sleipnir/pkg/bus"

// DefaultMaxInFlight is the default bound on requests a frontend holds at once, from arrival to reply: at 600
// requests a second answered within a second, seven times what it needs.
const DefaultMaxInFlight = 4096

// DefaultRequestBacklog is the default bound on requests waiting for the request callback: seconds of a flood, on
// a machine too busy for the callback to keep up; a few MiB of small requests.
const DefaultRequestBacklog = 4096

// What the results of one accepted request may hold in the result subscription's buffer, should its callback stall:
// a message per worker batch that reported leaves of the request (the examples' requests have at most 18 leaves),
// with their outputs (scores, a line of text and its box).
const (
	resultMsgsPerRequest  = 64
	resultBytesPerRequest = 64 << 10
)

// admit takes a place in flight for a request; false when the frontend holds MaxInFlight already. A request admitted
// gives its place back (release) once it has its one reply.
func (f *Frontend) admit() bool {
	if f.inFlight.Add(1) > int64(f.cfg.MaxInFlight) {
		f.inFlight.Add(-1)
		return false
	}
	return true
}

func (f *Frontend) release() { f.inFlight.Add(-1) }

// inFlightRefusal is why a request found no place in flight.
func (f *Frontend) inFlightRefusal() error {
	return refuse(ErrOverloaded, "overloaded: the frontend holds its limit of %d requests in flight; retry later",
		f.cfg.MaxInFlight)
}

// intakeRefusal is why the intake did not take a request.
func (f *Frontend) intakeRefusal() error {
	if f.intake.isClosed() {
		return refuse(ErrUnavailable, "the frontend is shutting down")
	}
	return refuse(ErrOverloaded, "overloaded: %d requests are already waiting in the frontend; retry later", f.cfg.IntakeQueue)
}

// requestLimits bound the requests waiting for the request callback: RequestBacklog of them, and a few of the largest
// in bytes. The callback never waits (it refuses, or hands the request to the intake), so a backlog is a flood
// faster than it: what is over the limits is dropped unanswered (its client times out) and counted, where a refusal
// would cost a reply. The bytes let a lone request of any size the server admits through, so that one over
// MaxRequestBytes is refused with a reply, not dropped.
func (f *Frontend) requestLimits() bus.Limits {
	return bus.Limits{Msgs: f.cfg.RequestBacklog, Bytes: max(4*f.cfg.MaxRequestBytes, 2*int(f.nc.MaxPayload()))}
}

// resultLimits bound the results waiting for the result callback. A dropped result leaves its request to end late,
// at its deadline, though its work was done; so the buffer holds the results of every request in flight at once
// (MaxInFlight requests, each with up to resultMsgsPerRequest messages and resultBytesPerRequest bytes), which only
// results that no accepted request asked for can overflow. The callback is a decode and a map lookup: in practice
// few results wait.
func (f *Frontend) resultLimits() bus.Limits {
	return bus.Limits{Msgs: f.cfg.MaxInFlight * resultMsgsPerRequest,
		Bytes: max(f.cfg.MaxInFlight*resultBytesPerRequest, 2*int(f.nc.MaxPayload()))}
}
