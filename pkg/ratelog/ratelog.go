// Package ratelog keeps a service's log readable under a flood of bad input: each kind of complaint (a key such as
// "bad task message") is logged at most Burst times per Every, every occurrence is counted, and the first line after a
// quiet spell says how many were left out. Services count bad input here instead of logging each message.
package ratelog

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Limiter rate-limits log lines by key. The zero value is not usable; call New.
type Limiter struct {
	log   *slog.Logger
	every time.Duration
	burst int
	now   func() time.Time

	mu    sync.Mutex
	kinds map[string]*kind
}

type kind struct {
	total      uint64
	windowFrom time.Time
	inWindow   int
	suppressed uint64 // since the last line written
}

// New logs through log at most burst lines per key in each period of every (defaults: 5 per 10 s).
func New(log *slog.Logger, every time.Duration, burst int) *Limiter {
	if every <= 0 {
		every = 10 * time.Second
	}
	if burst <= 0 {
		burst = 5
	}
	return &Limiter{log: log, every: every, burst: burst, now: time.Now, kinds: map[string]*kind{}}
}

// WithClock makes the limiter read time from now (tests).
func (l *Limiter) WithClock(now func() time.Time) *Limiter { l.now = now; return l }

// Log counts one occurrence of key and writes it at level unless key's budget for the period is spent. The key is
// also the message, so it should be a constant: a bounded set of kinds.
func (l *Limiter) Log(level slog.Level, key string, args ...any) {
	now := l.now()
	l.mu.Lock()
	k := l.kinds[key]
	if k == nil {
		k = &kind{windowFrom: now}
		l.kinds[key] = k
	}
	k.total++
	if now.Sub(k.windowFrom) >= l.every {
		k.windowFrom, k.inWindow = now, 0
	}
	if k.inWindow >= l.burst {
		k.suppressed++
		l.mu.Unlock()
		return
	}
	k.inWindow++
	suppressed := k.suppressed
	k.suppressed = 0
	l.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	l.log.Log(context.Background(), level, key, args...)
}

// Warn is Log at slog.LevelWarn.
func (l *Limiter) Warn(key string, args ...any) { l.Log(slog.LevelWarn, key, args...) }

// Error is Log at slog.LevelError.
func (l *Limiter) Error(key string, args ...any) { l.Log(slog.LevelError, key, args...) }

// Counts returns how many times each key occurred since the limiter was made, logged or not.
func (l *Limiter) Counts() map[string]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]uint64, len(l.kinds))
	for key, k := range l.kinds {
		out[key] = k.total
	}
	return out
}

// Keys lists the keys seen, sorted.
func (l *Limiter) Keys() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.kinds))
	for key := range l.kinds {
		out = append(out, key)
	}
	sort.Strings(out)
	return out
}
