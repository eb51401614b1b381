package worker

// The variant a worker serves now: its executor, its subscription and the step that serves its batches.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/deadline"
	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	"github.com/sleipnir-serving/sleipnir/pkg/gears"
	"github.com/sleipnir-serving/sleipnir/pkg/hop"
	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/routing"
	"github.com/sleipnir-serving/sleipnir/pkg/telemetry"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// serving is the variant a worker runs now.
type serving struct {
	a        plan.Assignment
	spec     *pipeline.Spec
	plan     *plan.Plan
	task     *pipeline.Task
	variant  *pipeline.Variant
	exec     executor.Executor
	root     bool // the pipeline's root task: its items are requests, checked against the spec's inputs
	consumer jetstream.Consumer
	puller   *bus.Puller // the consumer's messages, one pull request a batch (fetchFirst)
	metrics  *metrics.WorkerVariant
	served   string // "pipeline:task/variant" (wire.ServedKey): the key of its measurements in a heartbeat
	policy   deadline.Policy
	budget   time.Duration // the task's latency budget on this variant: its profiled time at the max batch
	// stage is what the deadline policy knows of this variant under stagePlan, and table its forwarding (pkg/hop).
	stage     *deadline.Stage
	table     *hop.Table
	stagePlan *plan.Plan
	// gear is its gear switch when it runs a cascade's first variant under a plan with gears (pkg/gears).
	gear *gears.Switch
	// geared is its forwarding per gear when it runs a cascade's variant under a plan with gears (nil otherwise):
	// table is the one of its own gear (gear), or the plan's.
	geared *hop.Geared
	// The hop step's scratch: one item's sub-requests (child task index, inputs), and the stepper's.
	step        hop.Stepper
	children    []int
	childInputs [][]wire.Tensor
	// inputs and slots are a round's scratch (serveOnce), first its first message's (nextQueued), and tm a
	// forwarded message's (publishStep).
	first  [1]*inbound
	inputs []executor.Input
	slots  []slot
	tm     wire.TaskMessage
	// inProgress marks its unsettled batches' messages in progress.
	inProgress inProgress
	// settleBy bounds a batch settled before the next pull (serveOnce), reused from batch to batch: one batch is settled
	// so at a time, and a stopped timer of Go 1.23 on delivers nothing stale when reset.
	settleBy *time.Timer
	// carried are the messages taken for the last batch that did not fit it and had been handed back too often,
	// in order: the next batch begins with them (batching.HandBack).
	carried []*inbound
	// queues is the worker's reading of the queues it sends to (routing_mode queue and ramsis).
	queues *queueWatch
	// policies computes routing_mode ramsis's policies for the plan off the batch path (policies.go).
	policies policyWarmer
	log      *slog.Logger
	// The spans of its messages, made once: "process" spans; "send" spans with dests.
	process *telemetry.ProcessSpans
	// dests are the variants it has forwarded to.
	dests []dest
}

// dest is a variant a serving forwards to: its subject and "send" spans, made once.
type dest struct {
	task, variant, subject string
	sends                  *telemetry.SendSpans
}

// dest is task/variant's dest.
func (s *serving) dest(task, variant string) *dest {
	for i := range s.dests {
		if d := &s.dests[i]; d.task == task && d.variant == variant {
			return d
		}
	}
	subject := wire.TaskSubject(s.a.Pipeline, task, variant)
	s.dests = append(s.dests, dest{task: task, variant: variant, subject: subject,
		sends: telemetry.NewSendSpans(subject)})
	return &s.dests[len(s.dests)-1]
}

// refreshStage rebuilds the deadline stage and the forwarding table when the plan has changed.
func (s *serving) refreshStage() {
	if s.stage != nil && s.plan == s.stagePlan {
		s.policies.use(s.table, s.spec, s.plan) // once they are computed
		return
	}
	s.stagePlan = s.plan
	s.table = hop.ForReplica(s.spec, s.plan, s.policy, s.a.Task, s.a.Variant, s.budget, s.task.Children)
	s.stage = s.table.Stage
	if s.queues != nil {
		s.queues.watch(s.spec, s.plan, s.task)
	}
	s.policies.follow(s.spec, s.plan, s.task, s.log)
	s.prepare(s.table)
	s.geared = nil
	if len(s.plan.Gears[s.a.Task]) > 0 {
		s.geared = hop.NewGeared(s.table, s.spec, s.plan, s.policy, s.a.Task, s.a.Variant, s.budget,
			s.task.Children, s.prepare)
	}
	if s.gear = gears.Follow(s.gear, s.spec, s.plan, s.a.Task, s.a.Variant); s.gear != nil {
		s.table = s.geared.For(s.gear.Threshold())
	}
}

// prepare gives a table of its plan the queues it reads and the routing policies.
func (s *serving) prepare(t *hop.Table) {
	if s.queues != nil && routing.ReadsQueues(s.spec.RoutingMode) {
		t.Queues = s.queues
	}
	s.policies.use(t, s.spec, s.plan)
}

// same says n is the variant s serves: the executor and the consumer stay. A new max batch, budget or epoch is
// followed in place (follow): a re-plan that keeps a worker's variant costs it no model reload.
func (s *serving) same(n wanted) bool { return wanted{a: s.a, spec: s.spec}.sameVariant(n) }

// follow takes n's plan, and its max batch, budget and epoch when they changed (between batches: the next batch is
// sized by them).
func (s *serving) follow(n wanted, log *slog.Logger) {
	s.plan = n.plan
	if s.a == n.a || n.a.MaxBatch < 1 {
		return
	}
	if s.a.MaxBatch != n.a.MaxBatch || s.a.BudgetMs != n.a.BudgetMs {
		log.Info("serving", "pipeline", n.a.Pipeline, "variant", n.a.Key(), "max_batch", n.a.MaxBatch,
			"epoch", n.a.Epoch, "swap", time.Duration(0))
	}
	s.a = n.a
	s.budget = time.Duration(n.a.BudgetMs * float64(time.Millisecond))
	s.stage = nil // built again with the new budget
}

// consumerBindWait bounds the wait for a variant's consumer; a worker that gives up serves again at the next change
// of its assignment or of a plan (the planner publishes routing every second while demand is reported).
const consumerBindWait = 5 * time.Second

func (w *Worker) start(ctx context.Context, n wanted, t0 time.Time) (*serving, error) {
	v := n.spec.Variant(n.a.Task, n.a.Variant)
	if v == nil {
		return nil, fmt.Errorf("pipeline %s has no variant %s", n.a.Pipeline, n.a.Key())
	}
	if n.a.MaxBatch < 1 {
		return nil, fmt.Errorf("assignment %s: max batch %d", n.a.Key(), n.a.MaxBatch)
	}
	exec, err := w.cfg.NewExecutor(n.spec, n.a.Task, n.a.Variant,
		executor.Options{Seed: w.cfg.Seed, ModelsDir: w.cfg.ModelsDir})
	if err != nil {
		return nil, err
	}
	// The planner creates the consumer, with its ack wait, before it assigns the variant; a worker only binds.
	bindCtx, cancel := context.WithTimeout(ctx, consumerBindWait)
	cons, err := bus.BindVariantConsumer(bindCtx, w.js, n.a.Pipeline, n.a.Task, n.a.Variant)
	cancel()
	var puller *bus.Puller
	if err == nil {
		puller, err = bus.BindPuller(w.nc, n.a.Pipeline, n.a.Task, n.a.Variant)
	}
	if err != nil {
		exec.Close()
		return nil, err
	}
	swap := time.Since(t0)
	w.swapMs.Store(float64bits(float64(swap) / float64(time.Millisecond)))
	w.log.Info("serving", "pipeline", n.a.Pipeline, "variant", n.a.Key(), "max_batch", n.a.MaxBatch,
		"epoch", n.a.Epoch, "swap", swap)
	policy, err := deadline.ParsePolicy(n.spec.DeadlinePolicy)
	if err != nil {
		exec.Close()
		_ = puller.Close()
		return nil, err
	}
	budget := time.Duration(n.a.BudgetMs * float64(time.Millisecond))
	return &serving{a: n.a, spec: n.spec, plan: n.plan, task: n.spec.Task(n.a.Task), variant: v, exec: exec,
		consumer: cons, puller: puller, metrics: w.cfg.Metrics.Variant(n.a.Pipeline, n.a.Task, n.a.Variant), served: n.a.Served().String(), policy: policy, budget: budget,
		root: n.spec.Root().Name == n.a.Task, queues: w.queues, log: w.log,
		policies: policyWarmer{readyFor: &w.policiesFor},
		process: telemetry.NewProcessSpans(wire.TaskSubject(n.a.Pipeline, n.a.Task, n.a.Variant),
			wire.Consumer(n.a.Task, n.a.Variant), semconv.MessagingClientID(w.cfg.ID),
			telemetry.AttrPipeline.String(n.a.Pipeline), telemetry.AttrTask.String(n.a.Task),
			telemetry.AttrVariant.String(n.a.Variant))}, nil
}

// stop ends serving: the messages carried are handed back, the executor closed, the subscription ended.
func (s *serving) stop() {
	s.handBack()
	s.exec.Close()
	_ = s.puller.Close()
}
