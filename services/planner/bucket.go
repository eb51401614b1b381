// The KV bucket, which the planner owns: the consumers, specs, plans and assignments it writes, puts back when
// someone else writes them, and reads back when it restarts.

package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// ensureConsumers creates the durable consumer of every variant a plan hosts.
func (p *Planner) ensureConsumers(ctx context.Context, spec *pipeline.Spec, pl *plan.Plan) error {
	for _, v := range pl.Variants {
		if _, err := bus.EnsureVariantConsumer(ctx, p.js, spec.Name, v.Task, v.Variant, p.cfg.AckWait); err != nil {
			return fmt.Errorf("consumer of %s/%s: %w", v.Task, v.Variant, err)
		}
	}
	return nil
}

func (p *Planner) putPlan(ctx context.Context, pl *plan.Plan) error {
	data, err := json.Marshal(pl)
	if err != nil {
		return err
	}
	if err := p.put(ctx, wire.PlanKey(pl.Pipeline), data); err != nil {
		return err
	}
	p.published.Store(pl.Pipeline, data)
	p.metrics.Plan(pl)
	return nil
}

// put writes key and remembers the write, so that onWritten tells it from someone else's.
func (p *Planner) put(ctx context.Context, key string, data []byte) error {
	p.mu.Lock()
	p.written[key] = writtenValue{value: data, revision: p.written[key].revision}
	p.mu.Unlock()
	rev, err := p.kv.Put(ctx, key, data)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if w := p.written[key]; bytes.Equal(w.value, data) && rev > w.revision {
		p.written[key] = writtenValue{value: data, revision: rev}
	}
	p.mu.Unlock()
	return nil
}

// deleteKey deletes key and remembers that the planner did.
func (p *Planner) deleteKey(ctx context.Context, key string) error {
	p.mu.Lock()
	p.written[key] = writtenValue{revision: p.written[key].revision}
	p.mu.Unlock()
	if err := p.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	return nil
}

// onWritten sees every write to the keys the planner owns (spec.*, plan.*, assign.*). One that is not the
// planner's (a value other than its last write, or a deletion of a key it wrote) is marked for repair: the planner
// puts its value back. Server permissions keep strangers out; this is the second line.
func (p *Planner) onWritten(e jetstream.KeyValueEntry) {
	key := e.Key()
	p.mu.Lock()
	w, ours := p.written[key]
	var foreign bool
	switch {
	case ours && e.Revision() <= w.revision:
		// The planner's own write, or an older one.
	case !ours:
		// Only assignments are the planner's whether it wrote them or not: it assigns every worker.
		_, assignment := wire.AssignKeys.Name(key)
		foreign = assignment && e.Operation() == jetstream.KeyValuePut
	case e.Operation() == jetstream.KeyValuePut:
		foreign = !bytes.Equal(e.Value(), w.value)
	default:
		foreign = ours && w.value != nil
		if _, assignment := wire.AssignKeys.Name(key); ours && !foreign && assignment {
			// The planner's own deletion of a gone worker's assignment: nothing left to remember of the key.
			delete(p.written, key)
		}
	}
	if foreign {
		p.tampered[key] = true
	}
	p.mu.Unlock()
	if foreign {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// repair puts back the keys someone else wrote: the planner's last value, or, for a key it never wrote (an
// assignment of a worker it does not know), deletes it. A spec or plan of a pipeline the planner does not serve is
// none of its business.
func (p *Planner) repair(ctx context.Context) {
	p.mu.Lock()
	keys := make([]string, 0, len(p.tampered))
	for k := range p.tampered {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	sort.Strings(keys)
	for _, key := range keys {
		p.mu.Lock()
		w, ours := p.written[key]
		p.mu.Unlock()
		_, assignment := wire.AssignKeys.Name(key)
		var err error
		switch {
		case ours && w.value != nil:
			err = p.put(ctx, key, w.value)
		case assignment:
			err = p.deleteKey(ctx, key)
		}
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("repairing a value in KV failed; will retry", "key", key, "err", err)
			}
			continue
		}
		p.mu.Lock()
		delete(p.tampered, key)
		p.mu.Unlock()
		p.complaints.Warn(complainTampered, "key", key)
	}
}

// publish writes a pipeline's spec and first plan (control.FirstPlan), after the stream and consumers the plan
// needs.
func (p *Planner) publish(ctx context.Context, spec *pipeline.Spec) (*plan.Plan, error) {
	pl, err := control.FirstPlan(spec)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", spec.Name, err)
	}
	if _, err := bus.EnsureTaskStream(ctx, p.js, spec.Name, p.cfg.Storage, p.replicas); err != nil {
		return nil, fmt.Errorf("pipeline %s: task stream: %w", spec.Name, err)
	}
	if err := p.ensureConsumers(ctx, spec, pl); err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", spec.Name, err)
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if err := p.put(ctx, wire.SpecKey(spec.Name), specJSON); err != nil {
		return nil, fmt.Errorf("pipeline %s: publish spec: %w", spec.Name, err)
	}
	// The epoch continues from the plan already in the bucket, so workers can tell a new plan from an old one
	// across planner restarts.
	if e, err := p.kv.Get(ctx, wire.PlanKey(spec.Name)); err == nil {
		var old plan.Plan
		if json.Unmarshal(e.Value(), &old) == nil && old.Epoch < math.MaxUint32 {
			pl.Epoch = old.Epoch
		}
	}
	pl.Epoch++
	if err := p.putPlan(ctx, pl); err != nil {
		return nil, fmt.Errorf("pipeline %s: publish plan: %w", spec.Name, err)
	}
	p.log.Info("plan published", "pipeline", spec.Name, "epoch", pl.Epoch, "mode", pl.Mode, "servers", pl.Servers())
	return pl, nil
}

// storedPlan is the plan of spec already in the bucket, when there is one and it passes validation against spec.
func (p *Planner) storedPlan(ctx context.Context, spec *pipeline.Spec) *plan.Plan {
	e, err := p.kv.Get(ctx, wire.PlanKey(spec.Name))
	if err != nil {
		return nil
	}
	var pl *plan.Plan
	if err := json.Unmarshal(e.Value(), &pl); err == nil {
		err = pl.Validate(spec)
	}
	if err != nil {
		p.complaints.Warn(complainStoredPlan, "pipeline", spec.Name, "err", err)
		return nil
	}
	return pl
}

// resume publishes spec and serves pl, the plan found in the bucket, as its own: its streams and consumers exist,
// it is written back unchanged (same epoch: no worker moves), and the demand and multiplicative-factor estimates
// start from what it was sized for.
func (p *Planner) resume(ctx context.Context, spec *pipeline.Spec, pl *plan.Plan) error {
	if _, err := bus.EnsureTaskStream(ctx, p.js, spec.Name, p.cfg.Storage, p.replicas); err != nil {
		return fmt.Errorf("pipeline %s: task stream: %w", spec.Name, err)
	}
	if err := p.ensureConsumers(ctx, spec, pl); err != nil {
		return fmt.Errorf("pipeline %s: %w", spec.Name, err)
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := p.put(ctx, wire.SpecKey(spec.Name), specJSON); err != nil {
		return fmt.Errorf("pipeline %s: publish spec: %w", spec.Name, err)
	}
	if err := p.putPlan(ctx, pl); err != nil {
		return fmt.Errorf("pipeline %s: publish plan: %w", spec.Name, err)
	}
	p.log.Info("plan resumed from KV", "pipeline", spec.Name, "epoch", pl.Epoch, "mode", pl.Mode,
		"servers", pl.Servers())
	return nil
}

// loadAssignments reads the assignments already in the bucket, so a restarted planner moves no worker needlessly.
// One that is not an assignment of a variant the planner serves is left out (and so replaced).
func (p *Planner) loadAssignments(ctx context.Context) error {
	lister, err := p.kv.ListKeysFiltered(ctx, wire.AssignKeys.Pattern())
	if err != nil {
		return err
	}
	for key := range lister.Keys() {
		e, err := p.kv.Get(ctx, key)
		if err != nil {
			continue
		}
		id, _ := wire.AssignKeys.Name(key)
		var a plan.Assignment
		if json.Unmarshal(e.Value(), &a) != nil || a.Worker != id {
			continue
		}
		if sp := p.spec(a.Pipeline); !a.Idle() && (sp == nil || sp.Variant(a.Task, a.Variant) == nil) {
			continue
		}
		p.assign[id] = a
		p.mu.Lock()
		p.written[key] = writtenValue{value: e.Value(), revision: e.Revision()}
		p.mu.Unlock()
	}
	return nil
}
