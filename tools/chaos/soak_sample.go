// The soak's sampler: every process's resident memory (VmRSS in /proc/PID/status) and goroutines (a service's
// go_goroutines, from its Prometheus endpoint; a nats-server's, counted in its /stacksz), every period.

package chaos

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sample is one process's reading. Goroutines is -1 when its endpoint did not answer.
type Sample struct {
	At         time.Time `json:"at"`
	Process    string    `json:"process"`
	PID        int       `json:"pid"`
	RSSKiB     int64     `json:"rss_kib"`
	Goroutines int       `json:"goroutines"`
	Node       bool      `json:"node,omitempty"` // a nats-server
}

// ClusterProcess names the samples of the nodes' resident memory and goroutines summed (PID 0), taken when every
// node answered: a node's own follow the connections (and the stream leaders) that move to it as another restarts.
const ClusterProcess = "nats-cluster"

// LoadSample is the machine's load average over the last minute (/proc/loadavg), read with the processes: the soak
// shares its cores with whatever else runs.
type LoadSample struct {
	At    time.Time `json:"at"`
	Load1 float64   `json:"load1"`
}

// sampler reads every process of a system every period until stop.
type sampler struct {
	mu      sync.Mutex
	samples []Sample
	load    []LoadSample
	cancel  context.CancelFunc
	done    chan struct{}
}

func startSampler(ctx context.Context, s *System, period time.Duration) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	sm := &sampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(sm.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			batch := s.sampleAll(ctx)
			load, err := loadAverage()
			sm.mu.Lock()
			sm.samples = append(sm.samples, batch...)
			if err == nil {
				sm.load = append(sm.load, LoadSample{At: time.Now(), Load1: load})
			}
			sm.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return sm
}

// stop ends the sampling and returns every sample and the load averages.
func (sm *sampler) stop() ([]Sample, []LoadSample) {
	sm.cancel()
	<-sm.done
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.samples, sm.load
}

// loadAverage is the first field of /proc/loadavg.
func loadAverage() (float64, error) {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(data), " ")
	return strconv.ParseFloat(first, 64)
}

// sampleAll reads every process that is up: the nodes, then the services by name.
func (s *System) sampleAll(ctx context.Context) []Sample {
	cl := &http.Client{Timeout: 2 * time.Second}
	var out []Sample
	cluster := Sample{At: time.Now(), Process: ClusterProcess}
	for _, n := range s.Nodes {
		pid := n.Pid()
		if pid == 0 {
			cluster.Goroutines = -1
			continue
		}
		sm := sample(n.Name(), pid, func() (int, error) { return countGoroutines(ctx, cl, n.MonitorURL()+"/stacksz") })
		sm.Node = true
		out = append(out, sm)
		if sm.Goroutines < 0 || cluster.Goroutines < 0 || sm.RSSKiB <= 0 {
			cluster.Goroutines = -1
		} else {
			cluster.Goroutines += sm.Goroutines
			cluster.RSSKiB += sm.RSSKiB
		}
	}
	if cluster.Goroutines > 0 {
		out = append(out, cluster)
	}
	names := make([]string, 0, len(s.procs))
	for name := range s.procs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := s.procs[name]
		if pid := p.pid(); pid != 0 && p.metricsURL != "" {
			out = append(out, sample(name, pid, func() (int, error) { return goGoroutines(ctx, cl, p.metricsURL) }))
		}
	}
	return out
}

// sample reads one process's memory and goroutines; a process that is gone or whose endpoint does not answer
// (starting, stopping) gives what could be read.
func sample(name string, pid int, goroutines func() (int, error)) Sample {
	sm := Sample{At: time.Now(), Process: name, PID: pid, Goroutines: -1}
	sm.RSSKiB, _ = rssKiB(pid)
	if n, err := goroutines(); err == nil {
		sm.Goroutines = n
	}
	return sm
}

// rssKiB is a process's resident set size, VmRSS in /proc/PID/status.
func rssKiB(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS for process %d", pid)
}

// goGoroutines reads go_goroutines from a Prometheus endpoint.
func goGoroutines(ctx context.Context, cl *http.Client, url string) (int, error) {
	body, err := get(ctx, cl, url)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("no go_goroutines at %s", url)
}

// countGoroutines counts the goroutines of a nats-server's stack dump (/stacksz, runtime.Stack of all).
func countGoroutines(ctx context.Context, cl *http.Client, url string) (int, error) {
	body, err := get(ctx, cl, url)
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range bytes.Lines(body) {
		if bytes.HasPrefix(line, []byte("goroutine ")) {
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("no goroutine in %s", url)
	}
	return n, nil
}

func get(ctx context.Context, cl *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
