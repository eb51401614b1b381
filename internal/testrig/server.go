// An embedded JetStream server per test, and connections that the test's end closes, because every test of the
// services needs them and each wrote its own: start, temporary store, shutdown after everything that used the server,
// connection errors. (A test that kills and restarts the server uses a real nats-server process: internal/natsproc.)

package testrig

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
)

// Embedded is an embedded NATS server with JetStream, started for one test (Server).
type Embedded struct {
	*server.Server
}

// ServerOption changes how Server starts the server.
type ServerOption func(*bus.ServerConfig)

// Listen makes the server listen on a free loopback port, for clients that connect by URL; without it only
// in-process connections (Embedded.Connect) reach it.
func Listen() ServerOption { return func(c *bus.ServerConfig) { c.Port = -1 } }

// Server starts an embedded JetStream server the way the services do (bus.StartServer), its store in a temporary
// directory of the test. It is shut down when the test ends, after the cleanups registered later (the services and
// connections that use it).
func Server(t testing.TB, opts ...ServerOption) *Embedded {
	t.Helper()
	cfg := bus.ServerConfig{StoreDir: t.TempDir()}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := bus.StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return &Embedded{Server: s}
}

// URL is where clients reach the server, with Listen.
func (e *Embedded) URL() string {
	return e.ClientURL()
}

// Connect opens an in-process connection named name, with the options every service uses (bus.ConnectInProcess),
// closed when the test ends.
func (e *Embedded) Connect(t testing.TB, name string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := bus.ConnectInProcess(e.Server, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Connect opens a connection named name to the server(s) at url, with the options every service uses (bus.Connect),
// closed when the test ends.
func Connect(t testing.TB, url, name string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := bus.Connect(url, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream is JetStream on nc.
func JetStream(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
