// Package frontend is the frontend service: it accepts requests on NATS (request-reply on wire.InferPrefix+pipeline)
// and HTTP (KServe v2), sends each to the root task's variant the routing table picks, collects the leaves the
// workers report, and replies exactly once: when every leaf is in, or at the deadline, whichever comes first.
package frontend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/sleipnir-serving/sleipnir/pkg/admission"
	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/catalog"
	"github.com/sleipnir-serving/sleipnir/pkg/completion"
	"github.com/sleipnir-serving/sleipnir/pkg/demand"
	"github.com/sleipnir-serving/sleipnir/pkg/metrics"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/ratelog"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Config is the frontend's configuration.
type Config struct {
	// ID names the frontend in its result subject; default: hostname-pid.
	ID string
	// HTTPAddr is where the KServe v2 HTTP API listens ("" disables it).
	HTTPAddr string
	// MaxRequestBytes refuses larger request payloads with an error reply.
	MaxRequestBytes int
	// DemandEvery is how often the frontend reports its accepted requests to the planner (default 1 s).
	DemandEvery time.Duration
	// IntakeWorkers is how many requests are decoded and published at once (default DefaultIntakeWorkers): the
	// bound on publishes in flight.
	IntakeWorkers int
	// IntakeQueue is how many requests may wait for an intake worker (default DefaultIntakeQueue); beyond it a
	// request is refused at once as overloaded.
	IntakeQueue int
	// MaxInFlight bounds the requests the frontend holds at once, from arrival to reply (default
	// DefaultMaxInFlight); beyond it a request is refused at once as overloaded. It also sizes the result
	// subscription's buffer (resultLimits).
	MaxInFlight int
	// RequestBacklog is how many requests may wait for the request callback (default DefaultRequestBacklog), which
	// refuses them or hands them to the intake; beyond it (a flood the callback cannot keep up with) the NATS client
	// drops them unanswered, and the frontend counts them (Stats.DroppedRequests).
	RequestBacklog int
	// MaxTimeout is the furthest ahead a request's deadline may be (Sleipnir-Timeout or Sleipnir-Deadline); further
	// is refused. Default: the larger of DefaultMaxTimeout and 10 times the pipeline's SLO. At most 24 h.
	MaxTimeout time.Duration
	// NoAdmission turns admission control off (pkg/admission; on by default, docs/admission.md), and Admission
	// tunes it (zero: its defaults). Without it, the frontend's bounds still refuse what they have no room for.
	NoAdmission bool
	Admission   admission.Config
	// Metrics, if set, records the frontend's requests and exports its counters (pkg/metrics; shared by the
	// frontends of a process).
	Metrics *metrics.Frontend
	Logger  *slog.Logger
}

// Defaults of Config.
const (
	// DefaultMaxRequestBytes is the default request size limit: an 8 MiB image or tensor.
	DefaultMaxRequestBytes = 8 << 20
	DefaultIntakeWorkers   = 32
	DefaultIntakeQueue     = 1024
	DefaultMaxTimeout      = time.Minute
	// maxMaxTimeout keeps every deadline far inside what Sleipnir-Deadline can carry (Unix nanoseconds, until 2262).
	maxMaxTimeout = 24 * time.Hour
)

// publishStallWait is how long a publish waits when too many acknowledgements are outstanding.
const publishStallWait = 200 * time.Millisecond

// shutdownGrace bounds each step of a shutdown: draining the request subscription, publishing what the intake holds.
// A variable for tests.
var shutdownGrace = 5 * time.Second

func (c *Config) setDefaults() {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", strings.Map(nameRune, host), os.Getpid())
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.DemandEvery == 0 {
		c.DemandEvery = time.Second
	}
	if c.IntakeWorkers <= 0 {
		c.IntakeWorkers = DefaultIntakeWorkers
	}
	if c.IntakeQueue <= 0 {
		c.IntakeQueue = DefaultIntakeQueue
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.RequestBacklog <= 0 {
		c.RequestBacklog = DefaultRequestBacklog
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("frontend", c.ID)
}

func nameRune(r rune) rune {
	if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
		return r
	}
	return '-'
}

// Stats counts what a frontend did since it started.
type Stats struct {
	Accepted uint64 `json:"accepted"`
	Refused  uint64 `json:"refused"` // error replies to requests that were never sent into the pipeline
	// Overloaded counts the refusals (in Refused) of requests beyond MaxInFlight, that the intake had no room for, or
	// that waited in it past their deadline.
	Overloaded  uint64 `json:"overloaded"`
	Replied     uint64 `json:"replied"`
	Late        uint64 `json:"late"`
	StrayLeaves uint64 `json:"stray_leaves"` // leaf reports for requests already answered (at their deadline)
	// JoinParts is the join parts the requests in flight hold now (at most one per parent of a join task each);
	// JoinFailures counts the joined items the frontend could not enqueue (docs/design.md, "Joins").
	JoinParts    int64  `json:"join_parts"`
	JoinFailures uint64 `json:"join_failures"`
	BadReports   uint64 `json:"bad_reports"` // undecodable or inconsistent result messages
	// ReplyFailures counts replies that could not be encoded or sent.
	ReplyFailures uint64 `json:"reply_failures"`
	// DemandWithheld counts demand reports not sent because their interval spanned a lost connection.
	DemandWithheld uint64 `json:"demand_withheld"`
	// Degraded counts the replies answered in time with some items degraded (deadline policy degrade).
	Degraded uint64 `json:"degraded"`
	// Of the requests answered late (Late) whose task message JetStream had acknowledged, those whose every leaf was
	// reported within lateWatch after the reply (the work was done, its report came late), and those still
	// incomplete then (a result lost on the way, or work that never finished). Requests answered late while
	// maxWatched were watched are in neither.
	LateCompleted  uint64 `json:"late_completed"`
	LateUnfinished uint64 `json:"late_unfinished"`
	// ExecutedItems counts the model executions of the items of answered requests, read from their leaves (a leaf
	// that finished or failed, and every item above a leaf); DroppedWorkItems those of requests answered dropped:
	// model time spent on nothing (what admission control saves).
	ExecutedItems    uint64 `json:"executed_items"`
	DroppedWorkItems uint64 `json:"dropped_work_items"`
	// InFlight is how many requests the frontend holds now, from arrival to reply (at most MaxInFlight).
	InFlight int64 `json:"in_flight"`
	// DroppedRequests, DroppedResults and DroppedControl count the messages the NATS client dropped, unanswered,
	// from the request, result and micro protocol subscriptions: over their pending limits (limits.go).
	DroppedRequests uint64 `json:"dropped_requests"`
	DroppedResults  uint64 `json:"dropped_results"`
	DroppedControl  uint64 `json:"dropped_control"`
}

// Frontend serves requests for every pipeline whose spec and plan are in the KV bucket.
type Frontend struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	log    *slog.Logger
	tracer trace.Tracer
	result string // this frontend's result subject
	boot   string // random per start, in every request id
	seq    atomic.Uint64
	intake *intake
	// inFlight counts the requests admitted and not yet answered (admit, release).
	inFlight atomic.Int64
	// droppedRequests, droppedResults and droppedControl count what the client dropped from the subscriptions.
	droppedRequests, droppedResults, droppedControl bus.Drops
	// stopping is cancelled when Run gives up on the publishes still in flight at shutdown.
	stopping    context.Context
	stopPublish context.CancelFunc
	// complaints rate-limits the log lines of bad input and failed replies; Stats counts every one.
	complaints *ratelog.Limiter
	micro      *microService // the NATS micro protocol's view of the frontend
	gate       *admission.Gate

	catalog *catalog.Catalog
	ready   chan struct{} // closed when the KV's initial specs and plans are loaded

	mu      sync.Mutex
	pending map[string]*request
	rng     *rand.Rand                     // routing, under mu
	roots   rootPolicies                   // routing_mode ramsis at the root, under mu (rootpolicy.go)
	demand  map[string]int                 // requests accepted per pipeline since the last report, under mu
	watched map[string]*completion.Tracker // requests answered late, for lateWatch (late.go), under mu

	// gaps are the times between the requests counted as demand, accepted or refused by admission control (the
	// plan check's arrivals, and the newest ones' rate at a step: demand.Estimator.Newest), under gapsMu: a leaf
	// lock, taken with mu held or alone, so that a refusal does not wait behind mu.
	gapsMu sync.Mutex
	gaps   map[string]*demand.Gaps

	// Admission control's state (admission.go), under admMu: its own lock, so that the request callback, which
	// decides, does not wait behind the result callback's use of mu.
	admMu sync.Mutex
	// gatePlans is what the gate needs of each pipeline's plan in force; refusedDemand the requests the gate refused
	// per pipeline since the last demand report.
	gatePlans     map[string]gatePlan
	refusedDemand map[string]int

	accepted, refused, overloaded, replied, late, stray, badReports, replyFailures, demandWithheld atomic.Uint64
	// joinParts is the join parts the pending requests hold (join.go); joinFailures the joined items not enqueued.
	joinParts                                                 atomic.Int64
	joinFailures                                              atomic.Uint64
	lateCompleted, lateUnfinished, executedItems, droppedWork atomic.Uint64
	degraded                                                  atomic.Uint64
}

// New prepares a frontend on a connection; Run serves.
func New(nc *nats.Conn, cfg Config) (*Frontend, error) {
	cfg.setDefaults()
	if !wire.ValidName(cfg.ID) {
		return nil, fmt.Errorf("frontend id %q: use letters, digits, '_' and '-' only", cfg.ID)
	}
	if cfg.MaxTimeout < 0 || cfg.MaxTimeout > maxMaxTimeout {
		return nil, fmt.Errorf("frontend max timeout %v: want at most %v", cfg.MaxTimeout, maxMaxTimeout)
	}
	// Acknowledgements outstanding are bounded by the requests the intake holds, plus those whose deadline passed
	// first (abandoned until JetStream answers, or the timeout).
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.IntakeWorkers+cfg.IntakeQueue),
		jetstream.WithPublishAsyncTimeout(max(cfg.MaxTimeout, DefaultMaxTimeout)))
	if err != nil {
		return nil, err
	}
	stopping, stopPublish := context.WithCancel(context.Background())
	f := &Frontend{
		stopping: stopping, stopPublish: stopPublish,
		cfg: cfg, nc: nc, js: js, log: cfg.Logger, tracer: otel.Tracer("sleipnir/frontend"),
		result: wire.ResultSubject(cfg.ID), boot: fmt.Sprintf("%012x", rand.Uint64()>>16),
		intake:     newIntake(cfg.IntakeQueue),
		complaints: ratelog.New(cfg.Logger, 0, 0),
		ready:      make(chan struct{}), pending: map[string]*request{}, demand: map[string]int{},
		watched: map[string]*completion.Tracker{}, gatePlans: map[string]gatePlan{}, refusedDemand: map[string]int{},
		gate: admission.New(cfg.Admission),
		gaps: map[string]*demand.Gaps{}, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0xf00d)),
	}
	f.micro = newMicroService(f)
	f.exportCounters()
	return f, nil
}

// Stats returns the frontend's counters.
func (f *Frontend) Stats() Stats {
	return Stats{Accepted: f.accepted.Load(), Refused: f.refused.Load(), Overloaded: f.overloaded.Load(),
		Replied: f.replied.Load(), Late: f.late.Load(), StrayLeaves: f.stray.Load(), BadReports: f.badReports.Load(),
		JoinParts: f.joinParts.Load(), JoinFailures: f.joinFailures.Load(),
		ReplyFailures: f.replyFailures.Load(), DemandWithheld: f.demandWithheld.Load(),
		LateCompleted: f.lateCompleted.Load(), LateUnfinished: f.lateUnfinished.Load(),
		ExecutedItems: f.executedItems.Load(), DroppedWorkItems: f.droppedWork.Load(),
		Degraded: f.degraded.Load(), InFlight: f.inFlight.Load(), DroppedRequests: f.droppedRequests.Total(),
		DroppedResults: f.droppedResults.Total(), DroppedControl: f.droppedControl.Total()}
}

// Ready is closed once the frontend has loaded the pipelines and plans in the KV bucket and takes requests.
func (f *Frontend) Ready() <-chan struct{} { return f.ready }

// Run serves until ctx is done; requests still pending then get an error reply.
func (f *Frontend) Run(ctx context.Context) error {
	// The planner owns the bucket: wait for it rather than create it.
	kv, err := bus.BindBucket(ctx, f.js)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("frontend: bind KV bucket: %w", err)
	}
	f.catalog = catalog.Watch(ctx, f.nc, kv, f.log, nil)
	// Take requests only once the pipelines are known, or early ones would be refused as unknown.
	select {
	case <-f.catalog.Ready():
	case <-ctx.Done():
		return nil
	}
	f.intake.start(f.cfg.IntakeWorkers)
	intakeClosed := false
	defer func() {
		if !intakeClosed {
			f.stopPublish()
			f.intake.close()
		}
	}()

	results, err := bus.Subscribe(f.nc, f.result, "", f.onResult, f.resultLimits(), &f.droppedResults)
	if err != nil {
		return err
	}
	defer results.Unsubscribe()
	requests, err := bus.Subscribe(f.nc, wire.InferPrefix+"*", wire.QueueFrontend, f.onRequest, f.requestLimits(),
		&f.droppedRequests)
	if err != nil {
		return err
	}
	defer requests.Unsubscribe()
	service, err := f.micro.subscribe(f.nc)
	defer func() {
		for _, sub := range service {
			_ = sub.Unsubscribe()
		}
	}()
	if err != nil {
		return fmt.Errorf("frontend: micro service: %w", err)
	}
	if err := f.nc.Flush(); err != nil {
		return fmt.Errorf("frontend: subscribe: %w", err)
	}
	close(f.ready)

	httpErr, stopHTTP := f.startHTTP()
	defer stopHTTP()
	go f.reportDemand(ctx)
	f.log.Info("frontend serving", "subject", wire.InferPrefix+"*", "results", f.result, "boot", f.boot)
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-httpErr:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			runErr = fmt.Errorf("HTTP API on %s: %w", f.cfg.HTTPAddr, err)
		}
	}
	f.shutdown(requests)
	intakeClosed = true
	return runErr
}

// startHTTP starts the HTTP API when Config.HTTPAddr asks for it: errs gives why it stopped serving (nil: no
// HTTP API), and stop shuts it down.
func (f *Frontend) startHTTP() (errs <-chan error, stop func()) {
	if f.cfg.HTTPAddr == "" {
		return nil, func() {}
	}
	httpErr := make(chan error, 1)
	srv := f.httpServer()
	go func() { httpErr <- srv.ListenAndServe() }()
	f.log.Info("HTTP API listening", "addr", f.cfg.HTTPAddr)
	return httpErr, func() { srv.Shutdown(context.Background()) }
}

// shutdown stops taking requests (from requests), submits those already taken in, then fails what is still
// pending: each gets its reply. It closes the intake.
func (f *Frontend) shutdown(requests *nats.Subscription) {
	if err := requests.Drain(); err == nil {
		for end := time.Now().Add(shutdownGrace); requests.IsValid() && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Publish what the intake holds, but give up on a stalled JetStream after a grace period: those get an error.
	giveUp := time.AfterFunc(shutdownGrace, f.stopPublish)
	f.intake.close()
	giveUp.Stop()
	f.failAll("the frontend is shutting down")
}

// Pipelines lists the pipelines this frontend can serve now.
func (f *Frontend) Pipelines() []string { return f.catalog.Pipelines() }

func (f *Frontend) lookup(name string) (*pipeline.Spec, *plan.Plan) { return f.catalog.Lookup(name) }
