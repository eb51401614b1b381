package bus

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// captureLogs makes the default logger write to the returned buffer until the test ends.
func captureLogs(t *testing.T) *syncBuffer {
	var logs syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return &logs
}

// TestBoundDropsCountedAndLogged: a subscription whose callback is stuck holds at most its pending limits; what
// comes beyond them is dropped, every message counted (also once the subscription is gone), and logged a few lines
// at most.
func TestBoundDropsCountedAndLogged(t *testing.T) {
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	logs := captureLogs(t)
	nc, err := ConnectInProcess(s, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	const limit, sent = 8, 200
	stuck, got := make(chan struct{}), make(chan struct{}, sent)
	var drops Drops
	sub, err := Subscribe(nc, "flood", "", func(*nats.Msg) {
		got <- struct{}{}
		<-stuck
	}, Limits{Msgs: limit, Bytes: 1 << 20}, &drops)
	if err != nil {
		t.Fatal(err)
	}
	for range sent {
		if err := nc.Publish("flood", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The message in the callback counts as pending until the callback returns: limit are kept, the rest dropped.
	want := uint64(sent - limit)
	deadline := time.Now().Add(5 * time.Second)
	for drops.Total() != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := drops.Total(); n != want {
		t.Fatalf("%d dropped of %d sent to a stuck callback with a limit of %d, want %d", n, sent, limit, want)
	}
	if msgs, _, _ := sub.Pending(); msgs > limit {
		t.Errorf("%d messages pending, over the limit of %d", msgs, limit)
	}
	for !strings.Contains(logs.String(), "pending limits") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), "dropped messages over a subscription's pending limits"); n < 1 || n > 5 {
		t.Errorf("%d log lines of the drops, want 1 to 5: %q", n, logs.String())
	}
	close(stuck)
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if n := drops.Total(); n != want {
		t.Errorf("%d dropped once the subscription is gone, want %d still", n, want)
	}
	if err := Bound(sub, Limits{Msgs: 0, Bytes: 1}, nil); err == nil {
		t.Error("a limit of 0 messages was taken (nats.go reads it as no limit)")
	}
}
