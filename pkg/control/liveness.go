package control

import (
	"slices"
	"sort"
	"time"
)

// Liveness tells a lost worker from a lost bus. A worker is live while its registration is refreshed within Timeout.
// But heartbeats also stop when the bus does (a server restart, a network blip, the planner's own connection lost),
// and expiring every worker then deletes every assignment and re-plans for none. So:
//   - Grace, called when the planner's connection was lost or re-established, gives every worker live before it a
//     fresh Timeout from then;
//   - when no worker at all has been heard from for three quarters of the Timeout (each refreshes many times in it),
//     it is the bus, or the watch that carries the heartbeats (a lost consumer): they stay live (there is no other
//     worker to give their replicas to anyway), and the first heartbeat after the silence gives the others a fresh
//     Timeout, since they reconnect one by one. Not "every worker's Timeout passed at once": heartbeats that stop
//     together were sent up to a period apart, so the earliest would expire while the latest still looked fresh; a
//     silence of three quarters comes first for any period under a quarter of the Timeout (1 s of 5 by default),
//     and a busy machine may delay every heartbeat by as much before it is taken for the bus's.
//
// A worker Live finds gone is forgotten (Gone returns it, so that the planner drops what it kept of it and deletes
// its registration): memory follows the workers alive, not every worker id ever seen.
//
// Pure (time passed in); not safe for concurrent use.
type Liveness struct {
	Timeout time.Duration

	last    map[string]time.Time // worker -> its last registration refresh
	live    map[string]bool      // the workers live at the last call of Live
	holding bool                 // every live worker went silent at once: they are held live
	gone    []string             // forgotten by Live since the last call of Gone
}

// NewLiveness tracks workers that are gone after timeout without a refresh.
func NewLiveness(timeout time.Duration) *Liveness {
	return &Liveness{Timeout: timeout, last: map[string]time.Time{}, live: map[string]bool{}}
}

// Seen records a registration refresh of worker id at at. It reports whether the worker was unknown.
func (l *Liveness) Seen(id string, at time.Time) bool {
	old, known := l.last[id]
	if !known || at.After(old) {
		l.last[id] = at
	}
	return !known
}

// Forget drops a worker that deregistered. It reports whether it was known.
func (l *Liveness) Forget(id string) bool {
	_, known := l.last[id]
	delete(l.last, id)
	delete(l.live, id)
	return known
}

// Grace gives every worker live at the last call of Live a fresh Timeout from now: the bus, not they, went away.
func (l *Liveness) Grace(now time.Time) {
	for id := range l.live {
		if l.last[id].Before(now) {
			l.last[id] = now
		}
	}
}

// Live returns the live workers at now, in name order. The others are gone: unless held live (no worker heard
// from for three quarters of the Timeout), they are forgotten, and Gone returns them.
func (l *Liveness) Live(now time.Time) []string {
	fresh := map[string]bool{}
	var newest time.Time
	for id, t := range l.last {
		if now.Sub(t) <= l.Timeout {
			fresh[id] = true
		}
		if t.After(newest) {
			newest = t
		}
	}
	switch {
	case len(l.live) > 0 && now.Sub(newest) > l.Timeout*3/4:
		l.holding = true // no one heard from: the bus
		return sortedKeys(l.live)
	case l.holding:
		// The bus is back: the first to reconnect need not be the only ones alive.
		l.holding = false
		l.Grace(now)
		for id := range l.live {
			if _, known := l.last[id]; known {
				fresh[id] = true
			}
		}
	}
	l.live = fresh
	for id := range l.last {
		if !fresh[id] {
			delete(l.last, id)
			l.gone = append(l.gone, id)
		}
	}
	return sortedKeys(fresh)
}

// Gone returns, in name order, the workers Live forgot since the last call: silent for longer than Timeout.
func (l *Liveness) Gone() []string {
	g := l.gone
	l.gone = nil
	slices.Sort(g)
	return g
}

// Known is how many workers the liveness remembers: the live ones and those silent for less than Timeout.
func (l *Liveness) Known() int { return len(l.last) }

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
