// A worker that cannot serve its assignment (the variant's executor does not load: a missing model, an init error;
// its consumer cannot be bound) says so in its heartbeat and tries again with backoff.

package worker

import (
	"context"
	"strings"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/catalog"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Retry backoff: the first retry after retryFirst, doubling with each failed attempt at the same variant, up to
// retryMax. A model copied in later is served within retryMax; a failure that costs something each time (a model
// that loads and then fails its warm-up, a bind that waits consumerBindWait) costs it at most once per retryMax.
const (
	retryFirst = time.Second
	retryMax   = 30 * time.Second
)

// retryDelay is the wait after the attempts-th failed attempt.
func retryDelay(attempts int) time.Duration {
	return min(retryFirst<<min(max(attempts-1, 0), 10), retryMax)
}

// Failing is what the worker cannot serve now, and why; nil when it serves its assignment or is idle.
func (w *Worker) Failing() *wire.AssignmentFailure {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fault
}

// setFault replaces the worker's fault (nil: none). The value is never changed in place: Failing hands it out.
func (w *Worker) setFault(f *wire.AssignmentFailure) {
	w.mu.Lock()
	w.fault = f
	w.mu.Unlock()
}

// cannotServe records that the worker could not start serving a, has its heartbeat say so at once, and returns how long
// it waits before trying again.
func (w *Worker) cannotServe(a plan.Assignment, err error) time.Duration {
	reason := err.Error()
	if len(reason) > wire.MaxFailureReason {
		reason = strings.ToValidUTF8(reason[:wire.MaxFailureReason], "") // not a rune cut in two
	}
	f := &wire.AssignmentFailure{Variant: a.Served().String(), Since: time.Now()}
	if old := w.Failing(); old != nil && old.Variant == f.Variant {
		f.Since, f.Attempts = old.Since, old.Attempts
	}
	f.Attempts++
	f.Reason = reason
	w.setFault(f)
	delay := retryDelay(f.Attempts)
	w.log.Error("cannot serve assignment; will try again", "variant", a.Key(), "attempt", f.Attempts,
		"retry_in", delay, "err", err)
	select {
	case w.beat <- struct{}{}:
	default:
	}
	return delay
}

// retryAfter waits d before the worker tries its assignment again, or less when what it should serve becomes
// another variant or spec (a fixed spec is tried at once).
func (w *Worker) retryAfter(ctx context.Context, cat *catalog.Catalog, failed wanted, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-w.changed:
			if !failed.sameVariant(w.want(cat)) {
				return
			}
		}
	}
}

// sameVariant says n asks for the variant and spec m does (whatever the max batch, budget or epoch).
func (m wanted) sameVariant(n wanted) bool {
	return m.a.Pipeline == n.a.Pipeline && m.a.Task == n.a.Task && m.a.Variant == n.a.Variant && m.spec == n.spec
}
