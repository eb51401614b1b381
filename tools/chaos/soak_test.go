package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// soakOf is a soak of one pipeline at 100 QPS measured for 10 minutes from start, every second clean, a frontend
// restarted at 4 minutes, and one service sampled every 5 s with rss(t) KiB and 30 goroutines (t from the start).
func soakOf(start time.Time, rss func(time.Duration) int64) *SoakResult {
	cfg := &SoakConfig{Duration: 10 * time.Minute, Recovery: 30 * time.Second, MemWarmup: 2 * time.Minute,
		MemWindow: time.Minute, Loads: map[string]float64{"p": 100}}
	sum := loadSummary{SeriesStartUnixMs: start.UnixMilli()}
	for range 600 {
		sum.Series = append(sum.Series, Second{Sent: 100, OK: 100})
		sum.Sent, sum.OK = sum.Sent+100, sum.OK+100
	}
	at := start.Add(4 * time.Minute)
	r := &SoakResult{Config: cfg, Start: start, Loads: map[string]loadSummary{"p": sum},
		Events: []SoakEvent{{Fault: "frontend-restart", Target: "fe1", At: at, End: at.Add(time.Second),
			LossFrom: at.Add(-1600 * time.Millisecond), LossTo: at.Add(time.Second)}}}
	for t := -20 * time.Second; t <= 10*time.Minute; t += 5 * time.Second {
		r.Samples = append(r.Samples, Sample{At: start.Add(t), Process: "planner", PID: 7, RSSKiB: rss(t), Goroutines: 30})
	}
	return r
}

// lose marks n requests of second i violated and lost, sent at its start.
func lose(r *SoakResult, i, n int) {
	sum := r.Loads["p"]
	sum.Series[i].OK -= n
	sum.Series[i].Violations += n
	sum.Series[i].Lost += n
	sum.OK, sum.Lost = sum.OK-n, sum.Lost+n
	for range n {
		sum.LostSentMs = append(sum.LostSentMs, int64(i)*1000)
	}
	r.Loads["p"] = sum
}

func TestSoakJudge(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	flat := func(time.Duration) int64 { return 50 << 10 }
	t.Run("clean", func(t *testing.T) {
		r := soakOf(start, flat)
		lose(r, 240, 5) // in flight at the restarted frontend
		for i := 241; i < 260; i++ {
			r.Loads["p"].Series[i].Violations = 50 // the fault's, inside its window
		}
		v := r.Judge()
		if !v.Pass {
			t.Fatalf("a clean soak failed: %+v", v)
		}
		if tot := v.Totals[0]; tot.Lost != 5 || tot.Unexplained != 0 || tot.OutsideViolations != 0 {
			t.Errorf("totals %+v: want 5 lost, all explained, no violation outside the window", tot)
		}
	})
	t.Run("lost outside the victim's flight", func(t *testing.T) {
		r := soakOf(start, flat)
		lose(r, 100, 1)
		v := r.Judge()
		if v.Pass || v.Totals[0].Unexplained != 1 || v.Rows[0].Unexplained != 0 {
			t.Errorf("a request lost 2 minutes before any fault: pass %v, totals %+v, row %+v", v.Pass, v.Totals[0], v.Rows[0])
		}
	})
	t.Run("violations outside the windows", func(t *testing.T) {
		r := soakOf(start, flat)
		for i := 400; i < 460; i++ {
			r.Loads["p"].Series[i].Violations = 2 // 2% for a minute: 0.2% of the outside requests
		}
		if v := r.Judge(); !v.Pass {
			t.Errorf("0.2%% outside failed: %+v", v.Totals)
		}
		for i := 460; i < 520; i++ {
			r.Loads["p"].Series[i].Violations = 10 // and 10% for another: 1.2%
		}
		v := r.Judge()
		if v.Pass || !strings.Contains(strings.Join(v.Totals[0].Failures, ""), "outside the recovery windows") {
			t.Errorf("1.2%% outside passed: %+v", v.Totals)
		}
	})
	t.Run("memory", func(t *testing.T) {
		// Growth of 2% a minute: about 14% from the first window after the warm-up (2-3 min) to the last (9-10).
		leak := func(d time.Duration) int64 { return int64(50<<10) * (100 + int64(2*d/time.Minute)) / 100 }
		v := soakOf(start, leak).Judge()
		if v.Pass || len(v.Memory) != 1 || !strings.Contains(strings.Join(v.Memory[0].Failures, ""), "resident memory grew") {
			t.Errorf("a leak of 2%% a minute: %+v", v.Memory)
		}
		// 1% a minute: 7%, within the bound.
		slow := func(d time.Duration) int64 { return int64(50<<10) * (100 + int64(d/time.Minute)) / 100 }
		if v := soakOf(start, slow).Judge(); !v.Pass {
			t.Errorf("1%% a minute failed: %+v", v.Memory)
		}
		// Growing during the warm-up only, then flat.
		warm := func(d time.Duration) int64 { return int64(40<<10) + int64(min(d, 2*time.Minute)/time.Second)*100 }
		if v := soakOf(start, warm).Judge(); !v.Pass {
			t.Errorf("growth within the warm-up failed: %+v", v.Memory)
		}
	})
	t.Run("nodes", func(t *testing.T) {
		// Three nodes of 100 MiB; sleipnir-1 restarted at 4 minutes comes back at 88 MiB, and its clients' 12 MiB
		// stay on sleipnir-2 (+12%): the nodes' sum is flat. With grow, every node gains 2% a minute as well.
		nodes := func(grow bool) *SoakResult {
			r := soakOf(start, flat)
			for at := -20 * time.Second; at <= 10*time.Minute; at += 5 * time.Second {
				down := at >= 4*time.Minute && at < 4*time.Minute+15*time.Second
				cluster := Sample{At: start.Add(at), Process: ClusterProcess}
				for i, name := range []string{"sleipnir-1", "sleipnir-2", "sleipnir-3"} {
					rss, pid := int64(100<<10), 100+i
					switch {
					case i == 0 && down:
						continue
					case i == 0 && at >= 4*time.Minute:
						rss, pid = 88<<10, 200
					case i == 1 && at >= 4*time.Minute:
						rss = 112 << 10
					}
					if grow {
						rss = rss * (100 + int64(2*at/time.Minute)) / 100
					}
					r.Samples = append(r.Samples, Sample{At: start.Add(at), Process: name, PID: pid, RSSKiB: rss,
						Goroutines: 170, Node: true})
					cluster.RSSKiB += rss
					cluster.Goroutines += 170
				}
				if !down {
					r.Samples = append(r.Samples, cluster)
				}
			}
			return r
		}
		if v := nodes(false).Judge(); !v.Pass {
			t.Errorf("a node that took a restarted one's clients (+12%%), the sum flat: failed %+v", v.Memory)
		}
		v := nodes(true).Judge()
		var failed []string
		for _, m := range v.Memory {
			if len(m.Failures) > 0 {
				failed = append(failed, m.Process)
			}
		}
		if v.Pass || !slices.Equal(failed, []string{ClusterProcess}) {
			t.Errorf("every node growing 2%% a minute: pass %v, failed %v; want the cluster's sum failed", v.Pass,
				failed)
		}
	})
}
