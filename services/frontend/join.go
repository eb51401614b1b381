// Joins: the frontend that owns a request keeps the parts of its join tasks' items and sends each joined item on
// (docs/design.md, "Joins"). A join's parents are the root's parallel children (pipeline validation), so the root's
// item "0" becomes one part per parent, "0.n" for the root's n-th child, each reported here as a leaf would be.

package frontend

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// joinWait is one join task's parts of a request: at most one per parent, so a request holds at most as many parts
// as its join tasks have parents, whatever is sent to the frontend.
type joinWait struct {
	task    *pipeline.Task
	parents []string           // the join's parents in the spec's order: a part's slot
	ids     []string           // per parent: its part's id ("0.n")
	den     uint64             // a part's weight denominator: the root's children
	parts   []*wire.ItemResult // per parent: its part, once arrived and until recorded or sent on
	taken   []bool             // per parent: its part arrived (a copy of it, redelivered, is ignored)
	missing []bool             // per parent: its part will not come (dropped or failed on the way)
	sent    bool               // the joined item went to the join task (or the join closed): later parts are leaves
	timer   *time.Timer        // mode window: closes the join WindowMs after its first part
}

// joined is a joined item to publish to its join task's variant.
type joined struct {
	r                    *request
	task, variant, msgID string
	path                 string
	item                 wire.Item
}

// joinSlot finds the join a leaf report of spec's pipeline is a part of: its join task and the parent's slot; nil
// for a leaf that is no part ("0.n", n a child of the root whose one child is a join task).
func joinSlot(spec *pipeline.Spec, id string) (*pipeline.Task, int) {
	rest, ok := strings.CutPrefix(id, wire.RootItemID+".")
	if !ok || strings.IndexByte(rest, '.') >= 0 {
		return nil, 0
	}
	n, err := strconv.Atoi(rest)
	root := spec.Root()
	if err != nil || n < 0 || n >= len(root.Children) {
		return nil, 0
	}
	j := spec.JoinAfter(root.Children[n])
	if j == nil {
		return nil, 0
	}
	for slot, p := range spec.Parents(j.Name) {
		if p == root.Children[n] {
			return j, slot
		}
	}
	return nil, 0
}

// join takes a leaf report it of r into its join if it is a part (ok) or a part that will not come (dropped or
// failed), and appends to record what the tracker records now (it itself, unless it waits as a part; the parts a
// closed join lets go) and to sends the joined items to publish. Under f.mu.
func (f *Frontend) join(r *request, spec *pipeline.Spec, p *plan.Plan, it wire.ItemResult, record []wire.ItemResult,
	sends []joined) ([]wire.ItemResult, []joined) {
	j, slot := joinSlot(spec, it.ID)
	if j == nil {
		return append(record, it), sends
	}
	w := r.joins[j.Name]
	if w == nil {
		if r.joins == nil {
			r.joins = map[string]*joinWait{}
		}
		w = newJoinWait(spec, j)
		r.joins[j.Name] = w
	}
	switch {
	case w.taken[slot]:
		return record, sends // the same part again (a redelivered message): its weight is counted already
	case it.Status != wire.ItemOK:
		w.missing[slot] = true
		record = append(record, it)
		if w.sent {
			return record, sends
		}
		return f.joinReady(r, p, w, record, sends)
	case w.sent:
		w.taken[slot] = true
		return append(record, it), sends
	}
	w.taken[slot] = true
	w.parts[slot] = &it
	f.joinParts.Add(1)
	if j.Join.Mode == pipeline.JoinWindow && w.timer == nil {
		id, task := r.id, j.Name
		w.timer = time.AfterFunc(time.Duration(j.Join.WindowMs*float64(time.Millisecond)), func() {
			f.closeWindow(id, task)
		})
	}
	return f.joinReady(r, p, w, record, sends)
}

func newJoinWait(spec *pipeline.Spec, j *pipeline.Task) *joinWait {
	parents := spec.Parents(j.Name)
	root := spec.Root()
	w := &joinWait{task: j, parents: parents, ids: make([]string, len(parents)), den: uint64(len(root.Children)),
		parts: make([]*wire.ItemResult, len(parents)), taken: make([]bool, len(parents)),
		missing: make([]bool, len(parents))}
	for i, parent := range parents {
		for n, c := range root.Children {
			if c == parent {
				w.ids[i] = wire.ChildItemID(wire.RootItemID, n)
			}
		}
	}
	return w
}

// joinReady sends w's joined item on when its mode has what it waits for: every part (all, and window before its
// time), the first (any); or lets the parts go as leaves when every part is accounted for and some will never
// come (all). Under f.mu.
func (f *Frontend) joinReady(r *request, p *plan.Plan, w *joinWait, record []wire.ItemResult,
	sends []joined) ([]wire.ItemResult, []joined) {
	arrived, missing := 0, 0
	for i := range w.parts {
		if w.taken[i] {
			arrived++
		} else if w.missing[i] {
			missing++
		}
	}
	switch {
	case arrived == 0:
		return record, sends
	case w.task.Join.Mode == pipeline.JoinAny, arrived == len(w.parts),
		w.task.Join.Mode == pipeline.JoinWindow && arrived+missing == len(w.parts):
		return f.sendJoined(r, p, w, record, sends)
	case arrived+missing == len(w.parts): // all: a part will never come
		return f.releaseParts(w, record), sends
	}
	return record, sends
}

// sendJoined makes w's parts one item of the join task, routed as its first part's variant routes to it. The item
// goes on with the weight and id of the first part's sub-request to the join (wire.ChildItemID(part, 0)); the
// other parts are recorded as leaves, with their outputs, so the weights still sum to the request's. Its inputs are
// the parts' outputs in the parents' order. Under f.mu.
func (f *Frontend) sendJoined(r *request, p *plan.Plan, w *joinWait, record []wire.ItemResult,
	sends []joined) ([]wire.ItemResult, []joined) {
	w.sent = true
	if w.timer != nil {
		w.timer.Stop()
	}
	var carrier *wire.ItemResult
	var inputs []wire.Tensor
	for i, part := range w.parts {
		if part == nil {
			continue
		}
		inputs = append(inputs, part.Outputs...)
		if carrier == nil {
			carrier = part
		} else {
			record = append(record, *part)
		}
		w.parts[i] = nil
		f.joinParts.Add(-1)
	}
	var variant string
	if len(carrier.Path) > 0 {
		variant = plan.Pick(p.Routing.Downstream[carrier.Path[len(carrier.Path)-1]][w.task.Name], f.rng.Float64())
	}
	if variant == "" { // the plan hosts no variant of the join: the first part ends here too
		return append(record, *carrier), sends
	}
	id := wire.ChildItemID(carrier.ID, 0)
	return record, append(sends, joined{r: r, task: w.task.Name, variant: variant, path: strings.Join(carrier.Path, ","),
		msgID: wire.TaskMsgID(r.id, carrier.ID, w.task.Name, variant),
		item:  wire.Item{ID: id, Den: carrier.Den, Inputs: inputs}})
}

// releaseParts records w's waiting parts as leaves: the join will not run. Under f.mu.
func (f *Frontend) releaseParts(w *joinWait, record []wire.ItemResult) []wire.ItemResult {
	w.sent = true
	if w.timer != nil {
		w.timer.Stop()
	}
	for i, part := range w.parts {
		if part != nil {
			record = append(record, *part)
			w.parts[i] = nil
			f.joinParts.Add(-1)
		}
	}
	return record
}

// closeWindow sends a window join on with the parts that arrived in its window (and answers the request if that
// completed it: the plan hosting no variant of the join).
func (f *Frontend) closeWindow(id, task string) {
	f.mu.Lock()
	r, ok := f.pending[id]
	var sends []joined
	done := false
	if ok && r.joins[task] != nil && !r.joins[task].sent {
		if _, p := f.lookup(r.pipeline); p != nil {
			var record []wire.ItemResult
			record, sends = f.sendJoined(r, p, r.joins[task], nil, nil)
			f.recordLocked(r, record)
		}
		if done = r.tracker.Done(); done {
			f.retireLocked(r)
		}
	}
	f.mu.Unlock()
	f.publishJoined(sends)
	if done {
		f.finish(r, false, "")
	}
}

// closeJoins ends r's joins at its deadline: the parts that arrived are recorded as leaves (what arrived), and
// those that did not as dropped past the deadline, so that a request whose only missing leaves were join parts is
// answered partial, not late. Under f.mu.
func (f *Frontend) closeJoins(r *request) {
	var record []wire.ItemResult
	for _, w := range r.joins {
		if w.sent {
			continue
		}
		record = f.releaseParts(w, record)
		for i := range w.parents {
			if !w.taken[i] && !w.missing[i] {
				record = append(record, wire.ItemResult{ID: w.ids[i], Den: w.den, Status: wire.ItemDropped,
					Reason: wire.DropDeadline})
			}
		}
	}
	f.recordLocked(r, record)
}

// retireLocked takes r, complete, out of the pending map: its deadline timer stopped and its join parts let go;
// the caller sends its reply. Under f.mu.
func (f *Frontend) retireLocked(r *request) {
	delete(f.pending, r.id)
	r.timer.Stop()
	f.dropJoins(r)
}

// dropJoins lets go of the parts r holds, answered. Under f.mu.
func (f *Frontend) dropJoins(r *request) {
	for _, w := range r.joins {
		if w.timer != nil {
			w.timer.Stop()
		}
		for i := range w.parts {
			if w.parts[i] != nil {
				w.parts[i] = nil
				f.joinParts.Add(-1)
			}
		}
	}
}

// recordLocked adds leaf reports to r's tracker. Under f.mu.
func (f *Frontend) recordLocked(r *request, record []wire.ItemResult) {
	for _, it := range record {
		if _, _, err := r.tracker.Add(it); err != nil {
			f.badReports.Add(1)
			f.complaints.Warn("inconsistent leaf report", "request", r.id, "err", err)
		}
	}
}

// publishJoined publishes joined items to their join tasks, each bounded by its request's deadline. One that fails
// leaves its request to its deadline, as a lost task message would.
func (f *Frontend) publishJoined(sends []joined) {
	for _, s := range sends {
		msg := nats.NewMsg(wire.TaskSubject(s.r.pipeline, s.task, s.variant))
		msg.Data = wire.AppendTaskMessage(nil, &wire.TaskMessage{Items: []wire.Item{s.item}})
		wire.TaskHeaders{RequestID: s.r.id, Deadline: s.r.deadline, Path: s.path, ReplyTo: f.result,
			MsgID: s.msgID}.Write(msg.Header.Set)
		go func() {
			ctx, cancel := context.WithDeadline(context.Background(), s.r.deadline)
			defer cancel()
			if _, err := f.js.PublishMsg(ctx, msg); err != nil {
				f.joinFailures.Add(1)
				f.complaints.Warn("joined item not enqueued", "request", s.r.id, "task", s.task, "err", err)
			}
		}()
	}
}
