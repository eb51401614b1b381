package natsproc

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRestartKeepsStreams: a file-backed stream survives a SIGKILL and a restart on the same store.
func TestRestartKeepsStreams(t *testing.T) {
	if _, err := Binary(); err != nil {
		t.Skip(err)
	}
	s, err := Start(Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	nc, err := nats.Connect(s.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	var info *jetstream.StreamInfo
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		st, err := js.Stream(ctx, "S")
		if err == nil {
			info, _ = st.Info(ctx)
			break
		}
	}
	if info == nil || info.State.Msgs != 1 {
		t.Fatalf("after a restart the stream holds %+v, want the 1 message", info)
	}
}
