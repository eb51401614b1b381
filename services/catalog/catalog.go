// Package catalog keeps, for a service, the pipeline specs and plans the planner publishes in the KV bucket, as the
// bucket changes. Frontends and workers share it.
package catalog

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// Catalog is the current specs and plans, by pipeline name.
type Catalog struct {
	log      *slog.Logger
	onChange func()

	mu    sync.RWMutex
	specs map[string]*pipeline.Spec
	plans map[string]*plan.Plan
	ready chan struct{}
}

// Watch starts following the bucket's spec.* and plan.* keys until ctx is done. onChange, if not nil, is called
// after every change, from the watching goroutines.
func Watch(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, log *slog.Logger, onChange func()) *Catalog {
	c := &Catalog{log: log, onChange: onChange, specs: map[string]*pipeline.Spec{}, plans: map[string]*plan.Plan{},
		ready: make(chan struct{})}
	var loaded sync.WaitGroup
	loaded.Add(2)
	go bus.WatchKV(ctx, nc, kv, "spec.*", c.onSpec, loaded.Done)
	go bus.WatchKV(ctx, nc, kv, "plan.*", c.onPlan, loaded.Done)
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

func (c *Catalog) onSpec(e jetstream.KeyValueEntry) {
	var s *pipeline.Spec
	if e.Operation() == jetstream.KeyValuePut {
		var err error
		if s, err = pipeline.ParseJSON(e.Value()); err != nil {
			c.log.Error("bad pipeline spec in KV", "key", e.Key(), "err", err)
			return
		}
	}
	set(c, c.specs, strings.TrimPrefix(e.Key(), "spec."), s)
}

func (c *Catalog) onPlan(e jetstream.KeyValueEntry) {
	var p *plan.Plan
	if e.Operation() == jetstream.KeyValuePut {
		p = new(plan.Plan)
		if err := json.Unmarshal(e.Value(), p); err != nil {
			c.log.Error("bad plan in KV", "key", e.Key(), "err", err)
			return
		}
	}
	set(c, c.plans, strings.TrimPrefix(e.Key(), "plan."), p)
}

// set stores v under name (nil deletes) and reports the change.
func set[T any](c *Catalog, m map[string]*T, name string, v *T) {
	c.mu.Lock()
	if v == nil {
		delete(m, name)
	} else {
		m[name] = v
	}
	c.mu.Unlock()
	if c.onChange != nil {
		c.onChange()
	}
}
