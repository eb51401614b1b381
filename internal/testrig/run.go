// Services run for the length of a test, because a service left running after its test (`go p.Run(ctx)` with a
// deferred cancel) goes on using a server being shut down, and the error a service stops with must fail the test,
// not vanish in a goroutine.

package testrig

import (
	"context"
	"sync"
	"testing"
)

// running holds, per test, how to tell each service Run started for it to stop.
var running = struct {
	sync.Mutex
	cancels map[testing.TB][]context.CancelFunc
}{cancels: map[testing.TB][]context.CancelFunc{}}

// Run runs a service (its Run method, or any function that runs until its context is done) in a goroutine until
// stop is called or the test ends. stop cancels the context and waits until run has returned; it may be called
// more than once. An error run returns before it is told to stop fails the test, named by name.
//
// When the test ends, all its services are told to stop at once (a worker may take its fetch wait to notice), and
// each has returned before the cleanups registered before its Run: its connection's, the server's.
func Run(t testing.TB, name string, run func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	running.Lock()
	if _, ok := running.cancels[t]; !ok {
		t.Cleanup(func() { // after every service's cleanup
			running.Lock()
			delete(running.cancels, t)
			running.Unlock()
		})
	}
	running.cancels[t] = append(running.cancels[t], cancel)
	running.Unlock()

	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("%s stopped: %v", name, err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(func() {
		running.Lock()
		for _, c := range running.cancels[t] {
			c()
		}
		running.Unlock()
		stop()
	})
	return stop
}
