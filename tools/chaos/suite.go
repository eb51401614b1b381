package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Config is one run of the suite.
type Config struct {
	// Sleipnir and Loadgen are the binaries (bin/sleipnir, bin/loadgen).
	Sleipnir, Loadgen string
	// Pipeline is the spec file the planner serves (examples/traffic.yaml: emulated executors, no models); the
	// faults' load and checks are on it.
	Pipeline string
	// MorePipelines are spec files the planner serves beside it (the soak loads every one).
	MorePipelines []string
	// PlannerArgs are more flags of the planner (its control knobs, such as --replan-sigmas).
	PlannerArgs []string
	Workers     int
	// Nodes is how many nats-server processes serve, clustered when more than one (0 or 1: one server).
	Nodes int
	// Netns runs every process in a network namespace of its own (netns.go; needs root).
	Netns bool
	QPS   float64
	// Settle is sent before measuring (the demand estimate and plan settle); Before is measured before the fault,
	// After from the fault on.
	Settle, Before, After time.Duration
	// Grace is how long past its deadline a request may go unanswered before loadgen counts it lost.
	Grace time.Duration
	// MaxRecovery is the longest recovery a fault may take.
	MaxRecovery time.Duration
	// NodeDown is how long a node fault keeps its node down (default 12 s, at most 60% of After).
	NodeDown time.Duration
	// Dir receives each fault's process logs (a directory per fault); default a temporary directory, removed.
	Dir  string
	Auth *Auth
	// Progress, if not nil, receives a line per step.
	Progress io.Writer
	// Metrics gives every service a Prometheus endpoint (--metrics-addr) the soak reads goroutines from.
	Metrics bool

	spec *pipeline.Spec
	// specs are every pipeline the planner serves: spec first, then MorePipelines'.
	specs []*pipeline.Spec
}

// Full and Short are the phases of `make chaos` and of the short version in `make test`. Both settle for 12 s: a
// cold system takes about that long to follow a sudden load (the demand's moving average, a re-plan or two).
func (c *Config) Full() {
	c.Settle, c.Before, c.After = 12*time.Second, 5*time.Second, 20*time.Second
}
func (c *Config) Short() {
	c.Settle, c.Before, c.After = 12*time.Second, 3*time.Second, 8*time.Second
}

func (c *Config) setDefaults() error {
	if c.Sleipnir == "" || c.Pipeline == "" {
		return errors.New("chaos: the sleipnir binary and a pipeline spec are required")
	}
	if c.Workers == 0 {
		c.Workers = 10
	}
	if c.QPS == 0 {
		c.QPS = 100
	}
	if c.Settle == 0 {
		c.Full()
	}
	if c.Grace == 0 {
		c.Grace = 5 * time.Second
	}
	if c.MaxRecovery == 0 {
		c.MaxRecovery = 5 * time.Second
	}
	if c.NodeDown == 0 {
		c.NodeDown = nodeDown
	}
	c.specs = nil
	for _, file := range append([]string{c.Pipeline}, c.MorePipelines...) {
		spec, err := pipeline.Load(file)
		if err != nil {
			return err
		}
		c.specs = append(c.specs, spec)
	}
	c.spec = c.specs[0]
	return nil
}

func (c *Config) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "chaos: "+format+"\n", args...)
	}
}

// Fault is one row of the suite.
type Fault struct {
	Name string
	// What the fault is, for the table's reader.
	Doc string
	// Short faults also run in the short version.
	Short bool
	// NeedsAuth faults are skipped without Config.Auth (forging is only refused by a server with permissions).
	NeedsAuth bool
	// NeedsCluster faults are skipped without a cluster of three nodes or more (Config.Nodes).
	NeedsCluster bool
	// LossExpected: the fault loses requests by its nature (a killed frontend's clients); the row documents how
	// many rather than failing on them.
	LossExpected bool
	// Inject runs at the fault's time with the load running; it returns notes for the table and failures (what
	// the fault itself must see, e.g. the crafted request answered). Restarts happen inside it.
	Inject func(ctx context.Context, s *System) (notes, failures []string, err error)
}

// Row is a fault's line in the table.
type Row struct {
	Fault       string `json:"fault"`
	Sent        int    `json:"sent"`
	OK          int    `json:"ok"`
	Lost        int    `json:"lost"`
	Duplicates  int    `json:"duplicates"`
	LateReplies int    `json:"late_replies"`
	// The violations by kind: replies partial, dropped, late, error ("no responders" included) or overloaded
	// (refused: admission control).
	Partial       int     `json:"partial"`
	Dropped       int     `json:"dropped"`
	Late          int     `json:"late"`
	Errors        int     `json:"errors"`
	Refused       int     `json:"refused"`
	ViolationsPct float64 `json:"violations_pct"`
	BaselinePct   float64 `json:"baseline_violations_pct"` // in the measured seconds before the fault
	RecoveryS     float64 `json:"recovery_s"`              // -1: violations had not settled by the end
	ResumeS       float64 `json:"resume_s"`                // to the first second from the fault with ok replies; -1: none
	// NoReplyS counts the seconds, from the one of the fault on, whose requests got no ok reply at all; SilenceS is
	// the longest run of them.
	NoReplyS int      `json:"no_reply_s"`
	SilenceS int      `json:"silence_s"`
	Crashes  []string `json:"crashes,omitempty"`
	Notes    []string `json:"notes,omitempty"`
	Failures []string `json:"failures,omitempty"`
	Pass     bool     `json:"pass"`
	Skipped  string   `json:"skipped,omitempty"`
	Series   []Second `json:"series,omitempty"`
	FaultAtS float64  `json:"fault_at_s"` // seconds into the measured series
	// LostAtS is when each lost request was sent, in seconds from the fault (negative: before it).
	LostAtS []float64 `json:"lost_at_s,omitempty"`
}

// Second mirrors loadgen's per-second series (its JSON).
type Second struct {
	Sent       int `json:"sent"`
	OK         int `json:"ok"`
	Violations int `json:"violations"`
	Lost       int `json:"lost"`
	Duplicates int `json:"duplicates"`
}

// Run runs the faults in turn, one fresh system each, and returns their rows in order.
func Run(ctx context.Context, cfg Config, faults []Fault) ([]Row, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if cfg.Loadgen == "" {
		return nil, errors.New("chaos: the loadgen binary is required")
	}
	var rows []Row
	for _, f := range faults {
		row, err := runFault(ctx, &cfg, f)
		if err != nil {
			return rows, fmt.Errorf("fault %s: %w", f.Name, err)
		}
		rows = append(rows, row)
		cfg.logf("%s", FormatRow(row))
	}
	return rows, nil
}

// runFault runs one fault on a fresh system under load and judges its row.
func runFault(ctx context.Context, cfg *Config, f Fault) (Row, error) {
	row := Row{Fault: f.Name, RecoveryS: -1, ResumeS: -1}
	if row.Skipped = skipReason(cfg, f); row.Skipped != "" {
		return row, nil
	}
	dir, cleanup, err := faultDir(cfg, f.Name)
	if err != nil {
		return row, err
	}
	defer cleanup()
	cfg.logf("%s: starting the system (logs in %s)", f.Name, dir)
	sys, err := startSystem(cfg, dir)
	if err != nil {
		return row, err
	}
	defer sys.Close()
	if err := sys.waitServing(ctx, cfg.spec.Name, 60*time.Second); err != nil {
		return row, err
	}
	load, err := startLoad(ctx, cfg, sys, dir)
	if err != nil {
		return row, err
	}
	defer load.close()
	cfg.logf("%s: load %.0f QPS, %v settling, %v before the fault, %v after", f.Name, cfg.QPS, cfg.Settle, cfg.Before,
		cfg.After)

	select {
	case err := <-load.done:
		return row, fmt.Errorf("loadgen exited early: %v", err)
	case <-time.After(cfg.Settle + cfg.Before):
	case <-ctx.Done():
		return row, ctx.Err()
	}
	settleCrashes := sys.Crashes() // not the fault's doing, but said
	faultAt := time.Now()
	cfg.logf("%s: injecting", f.Name)
	notes, failures, err := f.Inject(ctx, sys)
	if err != nil {
		return row, err
	}
	sum, err := load.summary()
	if err != nil {
		return row, err
	}
	notes = append(notes, measure(&row, sum, faultAt, settleCrashes)...)
	row.Crashes = sys.Crashes()
	row.Notes = notes
	if sum.FirstError != "" {
		row.Notes = append(row.Notes, "loadgen's first error: "+sum.FirstError)
	}
	row.Failures = append(failures, check(cfg, f, row)...)
	for _, judge := range sys.judges {
		n, fails := judge(row)
		row.Notes, row.Failures = append(row.Notes, n...), append(row.Failures, fails...)
	}
	row.Pass = len(row.Failures) == 0
	return row, nil
}

// skipReason says why f cannot run on the system cfg makes, or "".
func skipReason(cfg *Config, f Fault) string {
	switch {
	case f.NeedsAuth && cfg.Auth == nil:
		return "needs a server with users and permissions (--nats-conf, --user)"
	case f.NeedsCluster && cfg.Nodes < 3:
		return "needs a cluster of three nodes (--nodes 3)"
	}
	return ""
}

// faultDir is where a fault's processes write their logs: under cfg.Dir, else a temporary directory that cleanup
// removes.
func faultDir(cfg *Config, name string) (dir string, cleanup func(), err error) {
	if cfg.Dir == "" {
		tmp, err := os.MkdirTemp("", "sleipnir-chaos-*")
		if err != nil {
			return "", nil, err
		}
		return tmp, func() { os.RemoveAll(tmp) }, nil
	}
	dir = filepath.Join(cfg.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	return dir, func() {}, nil
}

// measure fills row from loadgen's summary of a fault injected at faultAt: the counts, the series, when replies
// resumed and when violations settled. It returns the notes that explain them.
func measure(row *Row, sum loadSummary, faultAt time.Time, settleCrashes []string) (notes []string) {
	row.Sent, row.OK, row.Lost = sum.Sent, sum.OK, sum.Lost
	row.Duplicates, row.LateReplies = sum.Duplicates, sum.LateReplies
	row.Partial, row.Dropped, row.Late, row.Errors, row.Refused = sum.Partial, sum.Dropped, sum.Late, sum.Errors,
		sum.Refused
	row.ViolationsPct = 100 * sum.SLOViolationRatio
	row.Series = sum.Series
	row.FaultAtS = float64(faultAt.UnixMilli()-sum.SeriesStartUnixMs) / 1000
	row.BaselinePct = 100 * baseline(sum.Series, row.FaultAtS)
	for _, ms := range sum.LostSentMs {
		row.LostAtS = append(row.LostAtS, float64(ms)/1000-row.FaultAtS)
	}
	if n := len(row.LostAtS); n > 0 {
		notes = append(notes, fmt.Sprintf("lost requests were sent from %+.2f s to %+.2f s of the fault",
			row.LostAtS[0], row.LostAtS[n-1]))
	}
	for _, c := range settleCrashes {
		notes = append(notes, "before the fault: "+c)
	}
	notes = append(notes, fmt.Sprintf("violations: %d partial, %d dropped, %d late, %d errors, %d refused, %d lost",
		row.Partial, row.Dropped, row.Late, row.Errors, row.Refused, row.Lost))
	for i := int(row.FaultAtS); i >= 0 && i < len(sum.Series); i++ {
		if sum.Series[i].OK > 0 {
			row.ResumeS = max(0, float64(i)-row.FaultAtS)
			notes = append(notes, fmt.Sprintf("ok replies resumed for requests sent %.1f s after the fault", row.ResumeS))
			break
		}
	}
	row.NoReplyS, row.SilenceS = silence(sum.Series, row.FaultAtS)
	if row.NoReplyS > 0 {
		notes = append(notes, fmt.Sprintf("%d seconds without an ok reply, %d in a row at most", row.NoReplyS, row.SilenceS))
	}
	if r, ok := Recovery(sum.Series, row.FaultAtS, 0.01, RecoveryWindow); ok {
		row.RecoveryS = r
		// What the window forgave is said, not hidden.
		if sent, v := violationsAfter(sum.Series, int(math.Ceil(row.FaultAtS+r))); v > 0 {
			notes = append(notes, fmt.Sprintf("after recovery: %d violations of %d requests", v, sent))
		}
	}
	return notes
}

// check holds a row to what the issue asks of every fault: nothing lost (unless the fault loses by its nature),
// no duplicate reply, no crash, recovery within MaxRecovery.
func check(cfg *Config, f Fault, row Row) []string {
	var fails []string
	if row.Lost > 0 && !f.LossExpected {
		fails = append(fails, fmt.Sprintf("%d requests lost", row.Lost))
	}
	if row.Duplicates > 0 {
		fails = append(fails, fmt.Sprintf("%d duplicate replies", row.Duplicates))
	}
	if len(row.Crashes) > 0 {
		fails = append(fails, fmt.Sprintf("%d processes crashed", len(row.Crashes)))
	}
	switch {
	case row.RecoveryS < 0:
		fails = append(fails, fmt.Sprintf("violations did not settle under 1%% (over %d s windows) by the end",
			RecoveryWindow))
	case row.RecoveryS > cfg.MaxRecovery.Seconds():
		fails = append(fails, fmt.Sprintf("recovery %.1f s, over %v", row.RecoveryS, cfg.MaxRecovery))
	}
	return fails
}

// RecoveryWindow is the span, in seconds of sending, over which Recovery judges violations. At 100 requests a second,
// 1% of one second is one request: one late reply among thousands after the system had settled (seen once in ten
// NATS restarts, 8 s after the fault and after 5 clean seconds) set the recovery time. Over 3 s it takes three.
const RecoveryWindow = 3

// Recovery is the time from the fault (faultAt, seconds into the series) to the end of the last second whose
// violations lie in a window of `window` seconds where they reach ratio of the window's requests; 0 if they never
// did. False if the violations had not settled by the series' end. The series' last second is partial and left out
// unless it is the only one after the fault.
func Recovery(series []Second, faultAt, ratio float64, window int) (float64, bool) {
	end := len(series)
	if end > 1 && float64(end-1) > faultAt {
		end-- // the last second is cut short by the end of sending
	}
	w := max(1, min(window, end))
	troubled := -1 // the last second with violations inside a window at or above ratio
	for j := 0; j+w <= end; j++ {
		var sent, violations int
		for _, s := range series[j : j+w] {
			sent, violations = sent+s.Sent, violations+s.Violations
		}
		if sent == 0 || violations == 0 || float64(violations) < ratio*float64(sent) {
			continue
		}
		for i := j + w - 1; i >= j; i-- {
			if series[i].Violations > 0 {
				troubled = max(troubled, i)
				break
			}
		}
	}
	settled := troubled + 1
	if settled >= end && troubled >= 0 {
		return 0, false
	}
	return max(0, float64(settled)-faultAt), true
}

// silence counts the seconds, from the one of the fault on, whose requests got no ok reply, and the longest run of
// them.
func silence(series []Second, faultAt float64) (seconds, longest int) {
	for i, run := max(0, int(faultAt)), 0; i < len(series); i++ {
		switch {
		case series[i].Sent > 0 && series[i].OK == 0:
			seconds++
			run++
			longest = max(longest, run)
		case series[i].OK > 0:
			run = 0
		}
	}
	return seconds, longest
}

// violationsAfter counts the requests sent from second `from` to the series' end and the violations among them.
func violationsAfter(series []Second, from int) (sent, violations int) {
	for i := max(0, from); i < len(series); i++ {
		sent, violations = sent+series[i].Sent, violations+series[i].Violations
	}
	return sent, violations
}

// baseline is the violation ratio of the whole seconds before the fault.
func baseline(series []Second, faultAt float64) float64 {
	var sent, viol int
	for i := 0; i < len(series) && float64(i+1) <= faultAt; i++ {
		sent += series[i].Sent
		viol += series[i].Violations
	}
	if sent == 0 {
		return 0
	}
	return float64(viol) / float64(sent)
}

// waitServing sends a request every 250 ms until one is answered ok.
func (s *System) waitServing(ctx context.Context, pipelineName string, limit time.Duration) error {
	req := probeRequest()
	for end := time.Now().Add(limit); time.Now().Before(end); {
		if rep, err := s.Ask(pipelineName, req, nil, time.Second); err == nil && rep.Status == wire.StatusOK {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("%w within %v", errNotReady, limit)
}

// probeRequest is a request like loadgen's: one FP32 image [64, 192] (the examples declare [-1, -1]).
func probeRequest() []byte {
	shape := []int64{64, 192}
	image := wire.NewFP32("image", shape, make([]float32, 64*192))
	data, _ := msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{image}})
	return data
}

// Ask sends one request on the suite's connection and decodes its reply.
func (s *System) Ask(pipelineName string, data []byte, hdr nats.Header, wait time.Duration) (*wire.InferReply, error) {
	m := nats.NewMsg(wire.InferSubject(pipelineName))
	m.Data = data
	for k, v := range hdr {
		m.Header[k] = v
	}
	if m.Header.Get(wire.HeaderContentType) == "" {
		m.Header.Set(wire.HeaderContentType, wire.ContentMsgpack)
	}
	reply, err := s.NC.RequestMsg(m, wait)
	if err != nil {
		return nil, err
	}
	var rep wire.InferReply
	if err := msgpack.Unmarshal(reply.Data, &rep); err != nil {
		return nil, fmt.Errorf("undecodable reply: %w", err)
	}
	return &rep, nil
}
