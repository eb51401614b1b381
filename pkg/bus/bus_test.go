package bus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func inProcess(t *testing.T) (*server.Server, jetstream.JetStream) {
	t.Helper()
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	nc, err := ConnectInProcess(s, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}

// TestStreamAndConsumers: creation is idempotent, each variant's consumer sees only its subject, and a subject no
// stream covers is refused.
func TestStreamAndConsumers(t *testing.T) {
	_, js := inProcess(t)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := EnsureTaskStream(ctx, js, "p", jetstream.MemoryStorage, 0); err != nil {
			t.Fatalf("EnsureTaskStream #%d: %v", i, err)
		}
	}
	var cons []jetstream.Consumer
	for _, v := range []string{"x", "y"} {
		for i := 0; i < 2; i++ {
			c, err := EnsureVariantConsumer(ctx, js, "p", "a", v, 0)
			if err != nil {
				t.Fatalf("EnsureVariantConsumer %s #%d: %v", v, i, err)
			}
			if i == 1 {
				cons = append(cons, c)
			}
		}
	}
	for i, v := range []string{"x", "x", "y"} {
		if _, err := js.Publish(ctx, wire.TaskSubject("p", "a", v), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []int{2, 1} {
		// The server counts a consumer's pending messages shortly after it acknowledges the publish, not before:
		// wait for the count (a busy machine made a first look see 1 of 2).
		var info *jetstream.ConsumerInfo
		for deadline := time.Now().Add(5 * time.Second); ; {
			var err error
			if info, err = cons[i].Info(ctx); err != nil {
				t.Fatal(err)
			}
			if int(info.NumPending) == want || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if int(info.NumPending) != want {
			t.Errorf("consumer %s has %d pending, want %d", info.Name, info.NumPending, want)
		}
		if info.Config.MaxAckPending != 100000 {
			t.Errorf("consumer %s MaxAckPending %d", info.Name, info.Config.MaxAckPending)
		}
	}
	if _, err := js.Publish(ctx, "sleipnir.task.other.a.x", []byte("x")); err == nil {
		t.Error("a publish to a subject no stream covers succeeded")
	}
}

func cut(hostport string) (string, string, bool) {
	for i := len(hostport) - 1; i >= 0; i-- {
		if hostport[i] == ':' {
			return hostport[:i], hostport[i+1:], true
		}
	}
	return hostport, "", false
}

func TestStartServerPortInUse(t *testing.T) {
	s1, err := StartServer(ServerConfig{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Shutdown()
	_, portStr, _ := cut(s1.Addr().String())
	var p int
	fmt.Sscanf(portStr, "%d", &p)
	if s2, err := StartServer(ServerConfig{StoreDir: t.TempDir(), Port: p}); err == nil {
		s2.Shutdown()
		t.Fatal("a second server started on a port in use")
	}
}

func TestHeaderCarrier(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	in := nats.Header{}
	in.Set("traceparent", tp)
	prop := propagation.TraceContext{}
	ctx := prop.Extract(context.Background(), HeaderCarrier(in))
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("extracted %v", sc)
	}
	out := nats.Header{}
	prop.Inject(ctx, HeaderCarrier(out))
	if v, ok := out["traceparent"]; !ok || v[0] != tp {
		t.Fatalf("injected %v, want lower-case traceparent %s", out, tp)
	}
}
