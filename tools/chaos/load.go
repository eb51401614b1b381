package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// loadSummary is the part of loadgen's --json summary the suite reads.
type loadSummary struct {
	Sent              int      `json:"sent"`
	OK                int      `json:"ok"`
	Lost              int      `json:"lost"`
	Partial           int      `json:"partial"`
	Dropped           int      `json:"dropped"`
	Late              int      `json:"late"`
	Errors            int      `json:"errors"`
	Refused           int      `json:"refused"`
	Duplicates        int      `json:"duplicates"`
	LateReplies       int      `json:"late_replies"`
	SLOViolationRatio float64  `json:"slo_violation_ratio"`
	FirstError        string   `json:"first_error"`
	SeriesStartUnixMs int64    `json:"series_start_unix_ms"`
	Series            []Second `json:"series"`
	LostSentMs        []int64  `json:"lost_sent_ms"`
}

// loadRun is loadgen running as a separate client process, its summary on stdout.
type loadRun struct {
	cmd      *exec.Cmd
	out      bytes.Buffer
	log      *os.File
	done     chan error
	stopLoad func() bool
}

// startLoad starts loadgen against sys: cfg's load, settling, then measured before and after the fault, each
// request under the pipeline's SLO. Its log goes to dir; ctx's end kills it.
func startLoad(ctx context.Context, cfg *Config, sys *System, dir string) (*loadRun, error) {
	return startLoadgen(ctx, sys, dir, "loadgen", cfg.spec, cfg.QPS, cfg.Settle, cfg.Before+cfg.After)
}

// startLoadgen starts loadgen, named name (its namespace's and log's), on one pipeline of sys at qps: warmup sent
// and not counted, then duration measured, each request under the pipeline's SLO, with the per-second series.
func startLoadgen(ctx context.Context, sys *System, dir, name string, spec *pipeline.Spec, qps float64, warmup,
	duration time.Duration) (*loadRun, error) {
	args := append(sys.ClientArgs(), "--pipeline", spec.Name, "--qps", fmt.Sprint(qps),
		"--warmup", warmup.String(), "--duration", duration.String(),
		"--timeout", fmt.Sprintf("%gms", spec.SLOMs), "--grace", sys.cfg.Grace.String(), "--json", "--series")
	_, wrap, err := sys.namespace(name)
	if err != nil {
		return nil, err
	}
	l := &loadRun{cmd: wrapped(wrap, sys.cfg.Loadgen, args...), done: make(chan error, 1)}
	if l.log, err = os.Create(filepath.Join(dir, name+".log")); err != nil {
		return nil, err
	}
	l.cmd.Stdout, l.cmd.Stderr = &l.out, l.log
	if err := l.cmd.Start(); err != nil {
		l.log.Close()
		return nil, err
	}
	l.stopLoad = context.AfterFunc(ctx, func() { _ = l.cmd.Process.Kill() })
	go func() { l.done <- l.cmd.Wait() }()
	return l, nil
}

// summary waits for loadgen to finish and reads its summary.
func (l *loadRun) summary() (loadSummary, error) {
	var sum loadSummary
	if err := <-l.done; err != nil {
		return sum, fmt.Errorf("loadgen: %v (%s)", err, strings.TrimSpace(l.out.String()))
	}
	if err := json.Unmarshal(lastLine(l.out.Bytes()), &sum); err != nil {
		return sum, fmt.Errorf("loadgen's summary: %v", err)
	}
	return sum, nil
}

// close stops watching the context and closes the log.
func (l *loadRun) close() {
	l.stopLoad()
	l.log.Close()
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}
