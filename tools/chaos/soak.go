// The soak (issue 47): the deployment serving several pipelines under a steady load for a long time, a fault every
// period in rotation (a worker killed, a NATS node killed and restarted, a frontend restarted), every process's
// resident memory and goroutines sampled; judged by soak_judge.go.

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// SoakConfig is one soak: the deployment (Config: Nodes, Pipeline and MorePipelines, Workers, Auth, Netns, Dir) and
// its load, length and faults.
type SoakConfig struct {
	Config
	// Loads is each pipeline's rate, requests per second, by pipeline name; every pipeline served needs one.
	Loads map[string]float64
	// Duration is measured, after Config.Settle (default 2 minutes) sent and not counted.
	Duration time.Duration
	// Every is the time between two faults, the first one Every after the measurement starts (default Duration/5,
	// at most 5 minutes).
	Every time.Duration
	// Recovery is each fault's recovery window: from its start to Recovery after its victim is back (default
	// 30 s). Violations in it are the fault's; outside, they count against the soak.
	Recovery time.Duration
	// Sample is how often every process's memory and goroutines are read (default 5 s).
	Sample time.Duration
	// MemWarmup is left out of a process's memory and goroutine series from the measurement's start, or from the
	// process's restart (default Duration/5); MemWindow is the span of each compared window (default Duration/10).
	MemWarmup, MemWindow time.Duration
}

func (c *SoakConfig) setDefaults() error {
	if c.Duration <= 0 {
		return errors.New("soak: a duration is required")
	}
	if c.Settle == 0 {
		c.Settle = 2 * time.Minute
	}
	if c.Every == 0 {
		c.Every = min(c.Duration/5, 5*time.Minute)
	}
	if c.Recovery == 0 {
		c.Recovery = 30 * time.Second
	}
	if c.Sample == 0 {
		c.Sample = 5 * time.Second
	}
	if c.MemWarmup == 0 {
		c.MemWarmup = c.Duration / 5
	}
	if c.MemWindow == 0 {
		c.MemWindow = c.Duration / 10
	}
	if err := c.Config.setDefaults(); err != nil {
		return err
	}
	if c.Loadgen == "" {
		return errors.New("soak: the loadgen binary is required")
	}
	for _, spec := range c.specs {
		if c.Loads[spec.Name] <= 0 {
			return fmt.Errorf("soak: no load for pipeline %s", spec.Name)
		}
	}
	if len(c.Loads) != len(c.specs) {
		return fmt.Errorf("soak: %d loads for %d pipelines", len(c.Loads), len(c.specs))
	}
	return nil
}

// SoakEvent is one fault of a soak.
type SoakEvent struct {
	Fault  string    `json:"fault"`
	Target string    `json:"target"`
	At     time.Time `json:"at"`
	// End is when the victim was back (restarted).
	End time.Time `json:"end"`
	// Requests sent from LossFrom to LossTo may be lost: those the victim held in flight. Zero: none may.
	LossFrom time.Time `json:"loss_from,omitzero"`
	LossTo   time.Time `json:"loss_to,omitzero"`
	Notes    []string  `json:"notes,omitempty"`
}

// soakFault is one kind of fault of the rotation; inject runs its k-th time (k from 0).
type soakFault struct {
	name   string
	inject func(ctx context.Context, s *System, k int) (SoakEvent, error)
}

// soakFaults is the rotation: each fault's victim is back before the fault returns.
var soakFaults = []soakFault{
	{name: "worker-kill", inject: func(ctx context.Context, s *System, k int) (SoakEvent, error) {
		active, err := s.assignedWorkers(ctx)
		if err != nil || len(active) == 0 {
			return SoakEvent{}, fmt.Errorf("no active worker to kill (%v)", err)
		}
		victim := active[k%len(active)]
		ev := SoakEvent{Target: victim.Worker, At: time.Now(),
			Notes: []string{fmt.Sprintf("SIGKILL %s (%s/%s), restarted after 2 s", victim.Worker, victim.Task, victim.Variant)}}
		err = s.KillAndRestart(ctx, victim.Worker, 2*time.Second)
		ev.End = time.Now()
		return ev, err
	}},
	{name: "node-restart", inject: func(ctx context.Context, s *System, k int) (SoakEvent, error) {
		node := s.Nodes[k%len(s.Nodes)]
		clients, err := connectedClients(node)
		if err != nil {
			return SoakEvent{}, err
		}
		ev := SoakEvent{Target: node.Name(), At: time.Now()}
		node.Kill()
		gone := time.Now()
		// Its clients' requests in flight may be lost, as in the node-loss suite (nodeLoss.judge).
		if exposed(clients) {
			ev.LossFrom, ev.LossTo = ev.At.Add(-s.maxSLO()-time.Second), gone.Add(time.Second)
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.cfg.NodeDown):
		}
		err = node.Restart()
		ev.End = time.Now()
		ev.Notes = []string{fmt.Sprintf("SIGKILL %s (clients: %s), restarted after %v", node.Name(),
			orNone(counted(clients)), s.cfg.NodeDown)}
		return ev, err
	}},
	{name: "frontend-restart", inject: func(ctx context.Context, s *System, k int) (SoakEvent, error) {
		// Always fe1: fe2 lives through the whole soak, its memory judged over all of it.
		ev := SoakEvent{Target: "fe1", At: time.Now(), Notes: []string{"SIGKILL fe1, restarted under the same --id after 1 s"}}
		ev.LossFrom, ev.LossTo = ev.At.Add(-s.maxSLO()-time.Second), ev.At.Add(time.Second)
		err := s.KillAndRestart(ctx, "fe1", time.Second)
		ev.End = time.Now()
		return ev, err
	}},
}

// maxSLO is the longest SLO of the pipelines served: a request's longest time in flight.
func (s *System) maxSLO() time.Duration {
	var slo float64
	for _, spec := range s.cfg.specs {
		slo = max(slo, spec.SLOMs)
	}
	return time.Duration(slo * float64(time.Millisecond))
}

// SoakResult is what a soak measured; Judge says whether it passed.
type SoakResult struct {
	Config  *SoakConfig            `json:"-"`
	Start   time.Time              `json:"measure_start"` // the measurement's start (after settling)
	Events  []SoakEvent            `json:"events"`
	Loads   map[string]loadSummary `json:"loads"`
	Samples []Sample               `json:"samples"`
	Load    []LoadSample           `json:"load_average"`
	Crashes []string               `json:"crashes,omitempty"`
}

// RunSoak starts the deployment, loads every pipeline for cfg.Settle and cfg.Duration, injects the rotation's faults
// every cfg.Every, samples every process, and returns what it saw.
func RunSoak(ctx context.Context, cfg SoakConfig) (*SoakResult, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := &cfg.Config
	dir, cleanup, err := faultDir(c, "soak")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	c.logf("soak: starting the system (logs in %s)", dir)
	c.Metrics = true
	sys, err := startSystem(c, dir)
	if err != nil {
		return nil, err
	}
	defer sys.Close()
	for _, spec := range c.specs {
		if err := sys.waitServing(ctx, spec.Name, 60*time.Second); err != nil {
			return nil, fmt.Errorf("%s: %w", spec.Name, err)
		}
	}
	sampler := startSampler(ctx, sys, cfg.Sample)
	loads := map[string]*loadRun{}
	for _, spec := range c.specs {
		l, err := startLoadgen(ctx, sys, dir, "loadgen-"+spec.Name, spec, cfg.Loads[spec.Name], c.Settle, cfg.Duration)
		if err != nil {
			return nil, err
		}
		defer l.close()
		loads[spec.Name] = l
		c.logf("soak: %s at %g QPS", spec.Name, cfg.Loads[spec.Name])
	}
	res := &SoakResult{Config: &cfg, Start: time.Now().Add(c.Settle), Loads: map[string]loadSummary{}}
	c.logf("soak: %v settling, then %v measured, a fault every %v from %s", c.Settle, cfg.Duration, cfg.Every,
		res.Start.Add(cfg.Every).Format(time.TimeOnly))
	// The last fault leaves its longest down time and recovery window before the end.
	last := res.Start.Add(cfg.Duration - c.NodeDown - cfg.Recovery)
	early := earlyExit(loads)
	for k, at := 0, res.Start.Add(cfg.Every); !at.After(last); k, at = k+1, at.Add(cfg.Every) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-early:
			return nil, fmt.Errorf("loadgen exited early: %v", err)
		case <-time.After(time.Until(at)):
		}
		f := soakFaults[k%len(soakFaults)]
		ev, err := f.inject(ctx, sys, k/len(soakFaults))
		ev.Fault = f.name
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		res.Events = append(res.Events, ev)
		c.logf("soak: %s at %s: %s", f.name, ev.At.Sub(res.Start).Round(time.Second), ev.Notes)
	}
	names := make([]string, 0, len(loads))
	for n := range loads {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sum, err := loads[n].summary()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		res.Loads[n] = sum
	}
	res.Samples, res.Load = sampler.stop()
	res.Crashes = sys.Crashes()
	if c.Dir != "" {
		if err := res.write(filepath.Join(dir, "soak.json")); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// earlyExit is a channel that receives a loadgen's exit; during the soak, that is a failure. Each exit is put back
// for summary.
func earlyExit(loads map[string]*loadRun) <-chan error {
	out := make(chan error, len(loads))
	for _, l := range loads {
		go func() {
			err := <-l.done
			l.done <- err
			out <- err
		}()
	}
	return out
}

// write saves the result as JSON.
func (r *SoakResult) write(file string) error {
	data, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}
