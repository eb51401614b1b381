package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), 10*time.Second, 3).WithClock(func() time.Time { return now })
	for i := 0; i < 1000; i++ {
		l.Warn("bad message", "i", i)
		l.Warn("other kind")
	}
	if got := strings.Count(buf.String(), "bad message"); got != 3 {
		t.Fatalf("%d lines of one kind in a period, want 3:\n%s", got, buf.String())
	}
	if got := strings.Count(buf.String(), "other kind"); got != 3 {
		t.Fatalf("%d lines of another kind, want 3 (kinds have budgets of their own)", got)
	}
	if c := l.Counts(); c["bad message"] != 1000 || c["other kind"] != 1000 {
		t.Fatalf("counts %v, want 1000 each: every occurrence counts, logged or not", c)
	}
	buf.Reset()
	now = now.Add(10 * time.Second)
	l.Warn("bad message")
	if !strings.Contains(buf.String(), "suppressed_since_last=997") {
		t.Fatalf("the first line of a new period should say how many were left out: %q", buf.String())
	}
}
