// Package completion decides when a request is complete, with no central counter: every item carries a weight 1/Den
// of its request (the root 1; a parent of weight w that emits k sub-requests gives each w/k), and the leaves the
// workers report sum to exactly 1 once every one has finished or was dropped, whatever order they arrive in. Item ids
// make a report that arrives twice (a redelivered message) count once. Pure: used by the frontend and the simulator.
package completion

import (
	"fmt"
	"math/big"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Tracker collects the leaf reports of one request. It is not safe for concurrent use.
type Tracker struct {
	seen    map[string]struct{}
	sum     big.Rat
	term    big.Rat // scratch, to avoid an allocation per report
	results []wire.ItemResult
	ok      int
	degrade int // degraded answers (wire.ItemDegraded)
	dropped int
	failed  int
}

// New returns an empty tracker.
func New() *Tracker { return &Tracker{seen: make(map[string]struct{}, 4)} }

// Add records one leaf report and says whether the request is now complete. A report for an item already seen is
// ignored (duplicate true). A report whose weight would push the total past 1 means ids or weights are inconsistent:
// it is refused with an error and not recorded.
func (t *Tracker) Add(r wire.ItemResult) (done, duplicate bool, err error) {
	if r.Den == 0 {
		return false, false, fmt.Errorf("item %q: weight denominator 0", r.ID)
	}
	if _, ok := t.seen[r.ID]; ok {
		return t.Done(), true, nil
	}
	t.term.SetFrac64(1, 1)
	t.term.Quo(&t.term, new(big.Rat).SetUint64(r.Den))
	next := new(big.Rat).Add(&t.sum, &t.term)
	if next.Cmp(one) > 0 {
		return t.Done(), false, fmt.Errorf("item %q: weight 1/%d exceeds what is left of the request", r.ID, r.Den)
	}
	t.sum.Set(next)
	t.seen[r.ID] = struct{}{}
	t.results = append(t.results, r)
	switch r.Status {
	case wire.ItemOK:
		t.ok++
	case wire.ItemDropped:
		t.dropped++
	case wire.ItemDegraded:
		t.degrade++
	default:
		t.failed++
	}
	return t.Done(), false, nil
}

var one = big.NewRat(1, 1)

// Clone is a tracker that goes on from t's reports without changing t.
func (t *Tracker) Clone() *Tracker {
	c := &Tracker{seen: make(map[string]struct{}, len(t.seen)), results: append([]wire.ItemResult(nil), t.results...),
		ok: t.ok, degrade: t.degrade, dropped: t.dropped, failed: t.failed}
	for id := range t.seen {
		c.seen[id] = struct{}{}
	}
	c.sum.Set(&t.sum)
	return c
}

// Done reports whether every leaf of the request has been reported.
func (t *Tracker) Done() bool { return t.sum.Cmp(one) == 0 }

// Results returns the leaf reports received so far, in arrival order.
func (t *Tracker) Results() []wire.ItemResult { return t.results }

// Status is the reply status for the reports received so far; late says the deadline passed first.
func (t *Tracker) Status(late bool) string {
	return StatusDegraded(late, t.ok, t.degrade, t.dropped, t.failed)
}

// Status is the reply status of a request whose leaves ok finished, dropped were dropped and failed failed; late
// says the deadline passed before every leaf was reported.
func Status(late bool, ok, dropped, failed int) string {
	return StatusDegraded(late, ok, 0, dropped, failed)
}

// StatusDegraded is Status when degraded leaves were answered with what an earlier task had made (deadline policy
// degrade): a request all of whose leaves were answered, some of them so, is degraded; a degraded leaf counts as
// an answer where some were dropped (partial).
func StatusDegraded(late bool, ok, degraded, dropped, failed int) string {
	switch {
	case late:
		return wire.StatusLate
	case degraded > 0 && dropped == 0 && failed == 0:
		return wire.StatusDegraded
	case ok > 0 && dropped == 0 && failed == 0:
		return wire.StatusOK
	case ok+degraded > 0:
		return wire.StatusPartial
	case failed > 0:
		return wire.StatusError
	default:
		return wire.StatusDropped
	}
}

// Accuracy is the served accuracy of a request: the mean of its finished leaves' path accuracies, each weighted by
// its share of the request (1/Den). The zero value is empty.
type Accuracy struct{ sum, weight float64 }

// Add counts one finished leaf.
func (a *Accuracy) Add(share, pathAccuracy float64) {
	a.sum += share * pathAccuracy
	a.weight += share
}

// Value is the mean; 0 when no leaf finished.
func (a Accuracy) Value() float64 {
	if a.weight == 0 {
		return 0
	}
	return a.sum / a.weight
}
