package bus

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// TestDeadLetterBounds: the dead-letter stream's retention is bounded (the defaults, then what the planner is told,
// applied to the stream it made before), and a consumer made before the redelivery bound existed (unbounded) gets
// it, with the backoff, when the planner ensures it again.
func TestDeadLetterBounds(t *testing.T) {
	_, js := inProcess(t)
	ctx := context.Background()
	st, err := EnsureDeadLetterStream(ctx, js, jetstream.MemoryStorage, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxAge != DefaultDeadLetterMaxAge || c.MaxBytes != DefaultDeadLetterMaxBytes ||
		c.Retention != jetstream.LimitsPolicy || !slices.Equal(c.Subjects, []string{wire.DeadLetterSubjects}) {
		t.Fatalf("dead-letter stream %+v", c)
	}
	if st, err = EnsureDeadLetterStream(ctx, js, jetstream.MemoryStorage, 0, time.Hour, 1<<20); err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxAge != time.Hour || c.MaxBytes != 1<<20 {
		t.Fatalf("re-declared with 1h and 1 MiB: %v, %d", c.MaxAge, c.MaxBytes)
	}

	if _, err := EnsureTaskStream(ctx, js, "p", jetstream.MemoryStorage, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, wire.TaskStream("p"), jetstream.ConsumerConfig{Durable: wire.Consumer("a", "x"),
		FilterSubject: wire.TaskSubject("p", "a", "x"), AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: -1}); err != nil {
		t.Fatal(err)
	}
	c, err := EnsureVariantConsumer(ctx, js, "p", "a", "x", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.CachedInfo().Config
	if cfg.MaxDeliver != SetAsideAt+1 || !slices.Equal(cfg.BackOff, TaskBackOff(time.Second)) || cfg.AckWait != time.Second {
		t.Fatalf("consumer: max deliver %d, backoff %v, ack wait %v", cfg.MaxDeliver, cfg.BackOff, cfg.AckWait)
	}
	if !SetAsideDue(uint64(SetAsideAt), cfg.MaxDeliver) || SetAsideDue(uint64(SetAsideAt-1), cfg.MaxDeliver) ||
		SetAsideDue(100, -1) {
		t.Fatal("SetAsideDue does not set aside at SetAsideAt, and only from there, on a bounded consumer")
	}
}
