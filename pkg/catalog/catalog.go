// Package catalog keeps, for a service, the pipeline specs and plans the planner publishes in the KV bucket, as the
// bucket changes. Frontends and workers share it.
//
// What the bucket holds is checked before it is followed: a spec that does not parse (or names another pipeline)
// and a plan that fails validation against its spec (pkg/plan.Plan.Validate) are refused, counted and logged (rate
// limited), and the last good one is kept, so a stray write does not stop traffic until the planner repairs it.
package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ratelog"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Complaints the catalog counts (pkg/ratelog keys).
const (
	ComplainSpec = "spec in KV refused; keeping the last good one"
	ComplainPlan = "plan in KV refused; keeping the last good one"
)

// Catalog is the current specs and plans, by pipeline name.
type Catalog struct {
	log        *slog.Logger
	complaints *ratelog.Limiter
	onChange   func()

	mu    sync.RWMutex
	specs map[string]*pipeline.Spec
	// specJSON is each spec as the bucket held it: a spec written again unchanged (the planner restarting, or
	// repairing the key) keeps its *Spec, so workers do not restart their variant for it.
	specJSON map[string][]byte
	plans    map[string]*plan.Plan // each valid against its spec
	// pending holds, per pipeline, the newest plan read that has no valid spec to check it against yet (a plan can
	// arrive before its spec: they are watched apart).
	pending map[string]*plan.Plan
	// spare is plan.SpareOfAll of plans, counted at each change: frontends read it per request.
	spare int
	ready chan struct{}
}

// Watch starts following the bucket's spec.* and plan.* keys until ctx is done. onChange, if not nil, is called
// after every change, from the watching goroutines.
func Watch(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, log *slog.Logger, onChange func()) *Catalog {
	c := &Catalog{log: log, complaints: ratelog.New(log, 0, 0), onChange: onChange, specs: map[string]*pipeline.Spec{},
		specJSON: map[string][]byte{},
		plans:    map[string]*plan.Plan{}, pending: map[string]*plan.Plan{}, ready: make(chan struct{})}
	var loaded sync.WaitGroup
	loaded.Add(2)
	go bus.WatchKV(ctx, nc, kv, wire.SpecKeys.Pattern(), c.onSpec, loaded.Done)
	go bus.WatchKV(ctx, nc, kv, wire.PlanKeys.Pattern(), c.onPlan, loaded.Done)
	go func() { loaded.Wait(); close(c.ready) }()
	return c
}

// Ready is closed once the bucket's initial specs and plans are loaded.
func (c *Catalog) Ready() <-chan struct{} { return c.ready }

// Lookup returns a pipeline's spec and plan (nil when absent).
func (c *Catalog) Lookup(name string) (*pipeline.Spec, *plan.Plan) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.specs[name], c.plans[name]
}

// Pipelines lists, sorted, the pipelines that have both a spec and a plan.
func (c *Catalog) Pipelines() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for name := range c.specs {
		if c.plans[name] != nil {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// SpareServers is how many of the servers the plans of every pipeline were made for no plan uses
// (plan.SpareOfAll): a pipeline's plan reaches its replicas and these (plan.Plan.Reach).
func (c *Catalog) SpareServers() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.spare
}

// Complaints counts what the catalog refused, by kind.
func (c *Catalog) Complaints() map[string]uint64 { return c.complaints.Counts() }

func (c *Catalog) onSpec(e jetstream.KeyValueEntry) {
	name, _ := wire.SpecKeys.Name(e.Key())
	c.mu.Lock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(c.specs, name)
		delete(c.specJSON, name)
		if p := c.plans[name]; p != nil {
			c.pending[name] = p
			delete(c.plans, name)
		}
		c.mu.Unlock()
		c.changed()
		return
	}
	same := c.specs[name] != nil && bytes.Equal(c.specJSON[name], e.Value())
	c.mu.Unlock()
	if same {
		return
	}
	s, err := pipeline.ParseJSON(e.Value())
	if err == nil && s.Name != name {
		err = fmt.Errorf("spec of pipeline %q", s.Name)
	}
	if err != nil {
		c.complaints.Error(ComplainSpec, "key", e.Key(), "err", err)
		return
	}
	c.mu.Lock()
	c.specs[name] = s
	c.specJSON[name] = e.Value()
	// The plan in force and any plan waiting for a spec are checked against the new spec; the newest that fits is
	// followed.
	for _, p := range []*plan.Plan{c.pending[name], c.plans[name]} {
		if p == nil {
			continue
		}
		if err := p.Validate(s); err == nil {
			c.plans[name] = p
			delete(c.pending, name)
			break
		}
	}
	if p := c.plans[name]; p != nil && p.Validate(s) != nil {
		c.pending[name] = p
		delete(c.plans, name)
	}
	c.mu.Unlock()
	c.changed()
}

func (c *Catalog) onPlan(e jetstream.KeyValueEntry) {
	name, _ := wire.PlanKeys.Name(e.Key())
	if e.Operation() != jetstream.KeyValuePut {
		c.mu.Lock()
		delete(c.plans, name)
		delete(c.pending, name)
		c.mu.Unlock()
		c.changed()
		return
	}
	var p *plan.Plan
	err := json.Unmarshal(e.Value(), &p)
	c.mu.Lock()
	s := c.specs[name]
	if err == nil && s == nil {
		if p == nil || p.Pipeline != name {
			err = fmt.Errorf("plan of pipeline %q", name)
		} else {
			c.pending[name] = p // checked when the spec arrives
			c.mu.Unlock()
			return
		}
	}
	if err == nil {
		err = p.Validate(s)
	}
	if err == nil {
		c.plans[name] = p
		delete(c.pending, name)
	}
	c.mu.Unlock()
	if err != nil {
		c.complaints.Error(ComplainPlan, "key", e.Key(), "err", err)
		return
	}
	c.changed()
}

// changed follows every change of specs or plans: it counts the plans' spare servers again and tells onChange.
func (c *Catalog) changed() {
	c.mu.Lock()
	c.spare = plan.SpareOfAll(maps.Values(c.plans))
	c.mu.Unlock()
	if c.onChange != nil {
		c.onChange()
	}
}
