package sim

import (
	"slices"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/latency"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// measure is worker srv measuring a model batch of n items of h that took d and ends end after now, as a live
// worker does (pkg/latency.Window); nothing when the planner plans with the profiles alone.
func (s *sim) measure(srv int, h *variantQueue, n int, d, end time.Duration) {
	if s.cfg.Control.ProfilesOnly {
		return
	}
	sv := &s.servers[srv]
	if sv.measured == nil {
		sv.measured = latency.NewWindow()
	}
	if !slices.Contains(sv.ran, h) {
		sv.ran = append(sv.ran, h)
	}
	sv.measured.AddAt(h.key, h.variant, n, d, s.now+int64(end))
}

// reportMaxAge is how long a simulated worker's latency report counts without a newer one (the planner's worker
// timeout): in the simulator every worker reports at every tick.
const reportMaxAge = 5 * time.Second

// latencies are server srv's heartbeat of the latencies it measured (pkg/latency.Window), per variant: in the
// server's own map and buffer, reused beat after beat (the core copies what it keeps), for the variants it ran (not
// every variant looked up in every server's window).
func (s *sim) latencies(srv int, now time.Time) map[string]wire.Observed {
	sv := &s.servers[srv]
	if sv.beat == nil {
		sv.beat = map[string]wire.Observed{}
	}
	clear(sv.beat)
	sv.summaries = sv.summaries[:0]
	for _, h := range sv.ran {
		at := len(sv.summaries)
		if sv.summaries = sv.measured.AppendSummary(sv.summaries, h.key, now); len(sv.summaries) > at {
			sv.beat[h.key] = wire.Observed{Latency: sv.summaries[at:len(sv.summaries):len(sv.summaries)]}
		}
	}
	return sv.beat
}
