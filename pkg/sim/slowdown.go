package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Slowdown emulates slower machines: from simulated time From on, every batch the workers First to Last (indices,
// inclusive) run takes Scale times its emulated latency, until a later Slowdown of the same worker takes over.
type Slowdown struct {
	First, Last int // All: every worker
	All         bool
	Scale       float64
	From        time.Duration
}

// SlowdownSyntax is ParseSlowdowns' syntax, for flag help.
const SlowdownSyntax = "[WORKERS=]SCALE@FROM,...: from simulated time FROM on, every batch of WORKERS " +
	"(all, the default; an index, or a range FIRST-LAST of indices from 0) takes SCALE times its latency " +
	"(2: twice as slow), until a later entry for the worker; e.g. 2@30s, or 0-4=3@1m,0-4=1@2m"

// ParseSlowdowns parses SlowdownSyntax; "" is none.
func ParseSlowdowns(s string) ([]Slowdown, error) {
	var out []Slowdown
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		d := Slowdown{All: true}
		rest := entry
		if who, r, ok := strings.Cut(entry, "="); ok {
			rest = r
			if who != "all" {
				d.All = false
				first, last, isRange := strings.Cut(who, "-")
				if !isRange {
					last = first
				}
				var err1, err2 error
				d.First, err1 = strconv.Atoi(first)
				d.Last, err2 = strconv.Atoi(last)
				if err1 != nil || err2 != nil || d.First < 0 || d.Last < d.First {
					return nil, fmt.Errorf("slowdown %q: workers %q: want all, N or FIRST-LAST", entry, who)
				}
			}
		}
		scale, from, ok := strings.Cut(rest, "@")
		if !ok {
			return nil, fmt.Errorf("slowdown %q: want [WORKERS=]SCALE@FROM", entry)
		}
		var err error
		if d.Scale, err = strconv.ParseFloat(scale, 64); err != nil || !(d.Scale > 0 && d.Scale <= 1000) {
			return nil, fmt.Errorf("slowdown %q: scale %q: want a number in (0, 1000]", entry, scale)
		}
		if d.From, err = time.ParseDuration(from); err != nil || d.From < 0 {
			return nil, fmt.Errorf("slowdown %q: from %q: want a duration of 0 or more", entry, from)
		}
		out = append(out, d)
	}
	return out, nil
}

// covers says d applies to worker srv.
func (d Slowdown) covers(srv int) bool { return d.All || srv >= d.First && srv <= d.Last }

// slowdownAt is the latency scale of worker srv at simulated time at: the entry of the latest From at or before at
// that covers it (the later listed on a tie), 1 when none does.
func slowdownAt(ds []Slowdown, srv int, at time.Duration) float64 {
	scale, since := 1.0, time.Duration(-1)
	for _, d := range ds {
		if d.covers(srv) && d.From <= at && d.From >= since {
			scale, since = d.Scale, d.From
		}
	}
	return scale
}
