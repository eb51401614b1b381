package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// Summary is the result of a run; its JSON form is loadgen's last line with --json.
type Summary struct {
	Pipeline  string  `json:"pipeline"`
	QPS       float64 `json:"qps"`
	DurationS float64 `json:"duration_s"`
	Sent      int     `json:"sent"`
	OK        int     `json:"ok"`
	Partial   int     `json:"partial"`
	Dropped   int     `json:"dropped"`
	Late      int     `json:"late"`
	Errors    int     `json:"errors"`
	// Degraded counts the replies answered in time with some items degraded (deadline policy degrade): SLO
	// violations, but answers; UnansweredRatio is the share of requests sent whose reply is neither ok nor degraded.
	Degraded        int     `json:"degraded"`
	UnansweredRatio float64 `json:"unanswered_ratio"`
	// Refused counts the replies with status overloaded: requests the system refused at once, before they cost
	// model time (admission control, the frontend's bounds). RefusedP99Ms is the 99th percentile of their latency.
	Refused      int     `json:"refused"`
	RefusedP99Ms float64 `json:"refused_p99_ms"`
	Lost         int     `json:"lost"`
	// Duplicates counts replies beyond the first to one attempt of a request (each one a broken exactly-once
	// promise); LateReplies, replies that came after their request was counted lost. Neither changes the request's
	// own outcome.
	Duplicates  int `json:"duplicates"`
	LateReplies int `json:"late_replies"`
	// Resent counts the attempts sent after a reconnect for requests unanswered when the connection dropped;
	// Retried, those sent after a "no responders" answer; ExtraReplies, replies to an attempt of a request that
	// another of its attempts had already answered (the work was done twice, the client told once: no fault).
	Resent       int `json:"resent"`
	Retried      int `json:"retried"`
	ExtraReplies int `json:"extra_replies"`
	// P50Ms .. MeanLatencyMs are the latencies of the replies to the requests the system accepted (every status
	// but overloaded).
	P50Ms             float64 `json:"p50_ms"`
	P95Ms             float64 `json:"p95_ms"`
	P99Ms             float64 `json:"p99_ms"`
	MeanLatencyMs     float64 `json:"mean_latency_ms"`
	SLOViolationRatio float64 `json:"slo_violation_ratio"`
	// AcceptedViolationRatio is the violations among the requests the system accepted: those not refused, whose
	// reply is not ok (lost ones included), over the requests sent less the refused.
	AcceptedViolationRatio float64 `json:"accepted_violation_ratio"`
	AchievedQPS            float64 `json:"achieved_qps"`
	// MeanAccuracy is the mean profiled end-to-end accuracy of the ok, degraded and partial replies (the reply's
	// accuracy).
	MeanAccuracy float64 `json:"mean_accuracy"`
	// With a labelled set (--images), over the ok replies: the share of true lines found and read exactly (what
	// was served), the same as the profile predicts it (each reply's profiled accuracy, weighted by its true lines),
	// and the mean character accuracy of whole pages.
	MeasuredAccuracy  float64 `json:"measured_accuracy,omitempty"`
	PredictedAccuracy float64 `json:"predicted_accuracy,omitempty"`
	PageCharAccuracy  float64 `json:"page_char_accuracy,omitempty"`
	FirstError        string  `json:"first_error,omitempty"`
	// SeriesStartUnixMs is when the measurement began (wall clock); Series[i] holds the requests sent in the i-th
	// second from then. Only with Config.Series.
	SeriesStartUnixMs int64    `json:"series_start_unix_ms,omitempty"`
	Series            []Second `json:"series,omitempty"`
	// LostSentMs is when each lost request was sent, in ms from the series' start (with Config.Series).
	LostSentMs []int64 `json:"lost_sent_ms,omitempty"`
	// PlanCost is what the plans in force during the run cost per hour (the command fills it in; watchCost).
	PlanCost
}

// Second is what became of the requests sent in one second of a run. A request violates its SLO unless its first
// reply is ok: a lost request, a failed publish and every other status are violations.
type Second struct {
	Sent       int `json:"sent"`
	OK         int `json:"ok"`
	Violations int `json:"violations"`
	Refused    int `json:"refused"` // of the violations, refused at once (status overloaded)
	Lost       int `json:"lost"`
	Duplicates int `json:"duplicates"`
}

// summarize makes the run's summary once every request is settled: the measurement ran from measureStart to
// sendEnd.
func (r *run) summarize(cfg Config, sendEnd, measureStart time.Time) (Summary, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sum
	s.DurationS = sendEnd.Sub(measureStart).Seconds()
	if s.DurationS > 0 {
		s.AchievedQPS = float64(s.Sent) / s.DurationS
	}
	if s.Sent > 0 {
		s.SLOViolationRatio = float64(s.Sent-s.OK) / float64(s.Sent)
		s.UnansweredRatio = float64(s.Sent-s.OK-s.Degraded) / float64(s.Sent)
	}
	if accepted := s.Sent - s.Refused; accepted > 0 {
		s.AcceptedViolationRatio = float64(accepted-s.OK) / float64(accepted)
	}
	if r.accN > 0 {
		s.MeanAccuracy = r.accSum / float64(r.accN)
	}
	if cfg.Series {
		s.SeriesStartUnixMs = measureStart.UnixMilli()
		s.Series = slices.Clone(r.series)
		for _, p := range r.requests {
			if p.lost && !p.warmup {
				s.LostSentMs = append(s.LostSentMs, p.sinceMs)
			}
		}
		slices.Sort(s.LostSentMs)
	}
	if t := r.truth; t.lines > 0 {
		s.MeasuredAccuracy = float64(t.exact) / float64(t.lines)
		s.PredictedAccuracy = t.predicted / float64(t.lines)
		s.PageCharAccuracy = t.pageChars / float64(t.pages)
	}
	slices.Sort(r.refusedLat)
	s.RefusedP99Ms = quantile(r.refusedLat, 0.99)
	slices.Sort(r.latencies)
	s.P50Ms, s.P95Ms, s.P99Ms = quantile(r.latencies, 0.5), quantile(r.latencies, 0.95), quantile(r.latencies, 0.99)
	if len(r.latencies) > 0 {
		total := 0.0
		for _, l := range r.latencies {
			total += l
		}
		s.MeanLatencyMs = total / float64(len(r.latencies))
	}
	if s.Sent > 0 && r.noResp == s.Sent {
		return s, fmt.Errorf("no frontend serves %s: every request failed with \"no responders\"", r.subject)
	}
	return s, nil
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(math.Round(q*float64(len(sorted)-1)))]
}

// report prints progress once per second until stop; during the warmup, what the warmup sent.
func (r *run) report(w io.Writer, start time.Time, warmup time.Duration, stop <-chan struct{}) {
	if w == nil {
		<-stop
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		s := r.sum
		inflight := 0
		for _, p := range r.requests {
			if !p.settled() {
				inflight++
			}
		}
		lat := slices.Clone(r.latencies)
		warmupSent := len(r.requests) - s.Sent
		r.mu.Unlock()
		if elapsed := time.Since(start); elapsed < warmup {
			fmt.Fprintf(w, "%5.1fs warming up (%.1fs left, not measured): sent %d in-flight %d\n",
				elapsed.Seconds(), (warmup - elapsed).Seconds(), warmupSent, inflight)
			continue
		}
		slices.Sort(lat)
		fmt.Fprintf(w, "%5.1fs sent %d ok %d partial %d dropped %d late %d errors %d refused %d in-flight %d p50 %.1fms\n",
			time.Since(start).Seconds(), s.Sent, s.OK, s.Partial, s.Dropped, s.Late, s.Errors, s.Refused, inflight,
			quantile(lat, 0.5))
	}
}
