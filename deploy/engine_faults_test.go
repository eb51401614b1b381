//go:build compose

package deploy_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/tools/chaos"
)

// The fault run's timing, in seconds of loadgen's measurement (after its warmup): the NATS node is killed at
// nodeKillAt and started again nodeDownFor later if Docker has not restarted it; the worker is killed at workerKillAt.
const (
	faultWarmup  = 10 * time.Second
	faultLength  = 60 * time.Second
	nodeKillAt   = 12 * time.Second
	nodeDownFor  = 12 * time.Second
	workerKillAt = 38 * time.Second
	// docs/faults.md and docs/deploy.md: after a SIGKILL of a NATS node, ok replies resume within 10 s; after a
	// worker's, violations settle (under 1% in every 3-second window) within 5 s.
	nodeSilenceBound    = 10
	workerRecoveryBound = 5.0
	// A request is in flight on a killed process when it was sent within its deadline (the traffic pipeline's SLO,
	// examples/traffic.yaml) before the kill, or in the second after it.
	trafficSLO = 600 * time.Millisecond
)

// faultRun runs loadgen at 200 QPS while a NATS node (the task stream's leader, unless that is nats-1, whose port
// loadgen uses: then nats-3) and worker are killed with docker kill, and judges it by the bounds above.
func faultRun(t *testing.T, d *deployment, loadgen string, client []string, worker string) {
	t.Helper()
	node := streamLeader(t, d, "SLEIPNIR_traffic")
	if node == "nats-1" || node == "" {
		node = "nats-3"
	}
	nodeID, workerID := d.container(t, node), d.container(t, worker)
	var nodeKilled, workerKilled time.Time
	var nodeKillTook, workerKillTook time.Duration
	var restartedBy string
	args := append(client, "--pipeline", "traffic", "--qps", "200", "--warmup", faultWarmup.String(),
		"--duration", faultLength.String(), "--series")
	start := time.Now()
	sum := runLoad(t, d.e, loadgen, args, func() {
		time.Sleep(faultWarmup + nodeKillAt)
		nodeKilled, nodeKillTook = kill(t, d, nodeID)
		time.Sleep(nodeDownFor)
		restartedBy = restart(t, d, nodeID)
		time.Sleep(time.Until(start.Add(faultWarmup + workerKillAt)))
		workerKilled, workerKillTook = kill(t, d, workerID)
	})
	workerRestart := restart(t, d, workerID)
	series := sum.Series
	at := func(when time.Time) float64 { return float64(when.UnixMilli()-sum.SeriesStartUnixMs) / 1000 }
	nodeAt, workerAt := at(nodeKilled), at(workerKilled)

	// Lost: only what was in flight on a killed process.
	var inFlight, other []float64
	for _, ms := range sum.LostSentMs {
		s := float64(ms) / 1000
		if within(s, nodeAt) || within(s, workerAt) {
			inFlight = append(inFlight, s)
		} else {
			other = append(other, s)
		}
	}
	silent := longestSilence(series, int(nodeAt), int(workerAt))
	i := int(workerAt)
	recovery, settled := chaos.Recovery(series[min(i, len(series)):], workerAt-float64(i), 0.01, chaos.RecoveryWindow)
	t.Logf("faults, 200 QPS for %s: sent %d, ok %d, lost %d (in flight on a killed process: sent at %v s), "+
		"duplicates %d, violations %.2f%%; load average %s", faultLength, sum.Sent, sum.OK, sum.Lost, inFlight, sum.Duplicates, 100*sum.SLOViolationRatio, loadAverage())
	t.Logf("  %s killed at %.2f s (docker kill took %s; %s), %d s in a row without an ok reply (bound %d)", node, nodeAt,
		nodeKillTook.Round(time.Millisecond), restartedBy, silent, nodeSilenceBound)
	t.Logf("  %s killed at %.2f s (docker kill took %s; %s), violations settled after %.2f s (bound %.0f)", worker, workerAt,
		workerKillTook.Round(time.Millisecond), workerRestart, recovery, workerRecoveryBound)
	t.Logf("  violations by second: %s", violationsBySecond(series))
	t.Logf("  plans published, from the measurement's start: %s", d.plansSince(t, time.UnixMilli(sum.SeriesStartUnixMs)))
	if len(other) > 0 || sum.Duplicates > 0 {
		t.Errorf("faults: lost %d requests not in flight on a killed process (sent at %v s), %d duplicates", len(other), other, sum.Duplicates)
	}
	if silent > nodeSilenceBound {
		t.Errorf("faults: %d s without an ok reply after %s's kill, over the %d s bound", silent, node, nodeSilenceBound)
	}
	if !settled || recovery > workerRecoveryBound {
		t.Errorf("faults: violations after %s's kill settled after %.1f s (settled: %v), over the %.0f s bound", worker, recovery, settled, workerRecoveryBound)
	}
	d.waitHealthy(t, 2*time.Minute)
}

// kill kills the container with docker kill, which returns once the container has exited (SIGKILL), and says
// when: the fault's time is the kill's end, as the fault suite's is its own SIGKILL, not docker's start-up before it.
func kill(t *testing.T, d *deployment, id string) (time.Time, time.Duration) {
	t.Helper()
	start := time.Now()
	d.e.docker(t, "kill", id)
	return time.Now(), time.Since(start)
}

// restart starts the killed container again unless Docker's restart policy did; it says which.
func restart(t *testing.T, d *deployment, id string) string {
	t.Helper()
	state := d.e.docker(t, "inspect", "-f", "{{.State.Status}} {{.RestartCount}}", id)
	if strings.HasPrefix(state, "running") || strings.HasPrefix(state, "restarting") {
		return "restarted by Docker: " + state
	}
	d.e.docker(t, "start", id)
	return "started again by the test, was " + state
}

// within: a request sent at s (seconds) was in flight at a fault at f.
func within(s, f float64) bool {
	return s >= f-trafficSLO.Seconds()-0.1 && s <= f+1
}

// longestSilence is the longest run of seconds from..to (excluded) whose requests got no ok reply.
func longestSilence(series []chaos.Second, from, to int) int {
	longest, run := 0, 0
	for i := max(0, from); i < min(to, len(series)); i++ {
		switch {
		case series[i].Sent > 0 && series[i].OK == 0:
			run++
			longest = max(longest, run)
		case series[i].OK > 0:
			run = 0
		}
	}
	return longest
}

func violationsBySecond(series []chaos.Second) string {
	var b strings.Builder
	for i, s := range series {
		if s.Violations > 0 {
			fmt.Fprintf(&b, "%d:%d/%d ", i, s.Violations, s.Sent)
		}
	}
	return b.String()
}

// streamLeader is the name of the NATS node that leads stream, by nats-1's monitoring endpoint (read inside its
// container: the monitoring port is published nowhere).
func streamLeader(t *testing.T, d *deployment, stream string) string {
	t.Helper()
	out := d.e.docker(t, "exec", d.container(t, "nats-1"), "wget", "-qO-", "http://127.0.0.1:8222/jsz?accounts=true&streams=true")
	var jsz struct {
		AccountDetails []struct {
			StreamDetail []struct {
				Name    string `json:"name"`
				Cluster struct {
					Leader string `json:"leader"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.Unmarshal([]byte(out), &jsz); err != nil {
		t.Fatalf("nats-1's /jsz: %v\n%s", err, lastLines(out, 5))
	}
	for _, a := range jsz.AccountDetails {
		for _, s := range a.StreamDetail {
			if s.Name == stream {
				return s.Cluster.Leader
			}
		}
	}
	t.Logf("no stream %s in nats-1's /jsz", stream)
	return ""
}
