package natsproc

import (
	"context"
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

// TestLameDuckHandsOver: a node of a three-node cluster stopped in lame-duck mode hands the leadership of an R3
// stream over at once (a SIGKILLed leader's is taken only after a raft election of 4 to 9 s), and exits within its
// lame-duck duration.
func TestLameDuckHandsOver(t *testing.T) {
	if _, err := Binary(); err != nil {
		t.Skip(err)
	}
	conf := "lame_duck_grace_period: 1s\nlame_duck_duration: 30s\n" // the shortest duration nats-server allows
	servers, err := StartCluster("ldm", 3, t.TempDir(), Config{Conf: conf, Monitor: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range servers {
			s.Stop()
		}
	}()
	if err := WaitHealthy(servers, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(URLs(servers), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := t.Context()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	leader := func() string {
		// Short: a request in flight during the hand-over may go unanswered.
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		info, err := st.Info(ctx)
		if err != nil || info.Cluster == nil {
			return ""
		}
		return info.Cluster.Leader
	}
	var old string
	for end := time.Now().Add(20 * time.Second); old == "" && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		old = leader()
	}
	var node *Server
	for _, s := range servers {
		if s.Name() == old {
			node = s
		}
	}
	if node == nil {
		t.Fatalf("stream S led by %q, not one of the cluster's nodes", old)
	}
	signalled := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- node.LameDuck(30 * time.Second) }()
	var now string
	for end := signalled.Add(15 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if now = leader(); now != "" && now != old {
			break
		}
	}
	took := time.Since(signalled)
	if now == "" || now == old {
		t.Errorf("no new leader 15 s after the lame-duck signal (led by %q)", now)
	} else if took > 2*time.Second {
		// Loose for a busy machine; a raft election after a crash takes 4 s or more.
		t.Errorf("new leader %s after %v, want the hand-over at once", now, took)
	}
	if err := <-stopped; err != nil {
		t.Error(err)
	}
	t.Logf("new leader %s after %v; the node exited after %v", now, took.Round(time.Millisecond),
		time.Since(signalled).Round(time.Millisecond))
}
