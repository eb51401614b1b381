package up

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// errorRecorder keeps the messages of the ERROR records logged through it.
type errorRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *errorRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (r *errorRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *errorRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *errorRecorder) WithGroup(string) slog.Handler      { return r }

// TestStartIsQuiet: a system that starts and serves logs no error. A worker reads its assignment before its
// catalog has loaded the pipeline's spec and plan; that is the order of a start, not a bad assignment (every worker
// logged "assignment in KV refused" at every start before).
func TestStartIsQuiet(t *testing.T) {
	rec := &errorRecorder{}
	sys, spec := startSystemWith(t, "../../examples/traffic.yaml", Config{Workers: 20, Logger: slog.New(rec)})
	c := newClient(t, sys)
	subject := c.Send(t, spec.Name, inputRequest(t), nil)
	if rep := decodeReply(t, c.Wait(t, []string{subject}, 5*time.Second)[subject][0]); rep.Status != wire.StatusOK {
		t.Fatalf("reply %q %q, want ok", rep.Status, rep.Error)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.msgs) > 0 {
		t.Fatalf("a clean start logged %d errors: %q", len(rec.msgs), rec.msgs)
	}
}
