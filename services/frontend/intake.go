package frontend

import "sync"

// intake is the bounded hand-off between the request callbacks and a fixed pool of goroutines that decode and
// publish. The NATS callback serves every request of the connection in turn, so it must never wait on JetStream: it
// offers the request here and, when the queue is full, refuses it at once instead of letting a backlog grow.
type intake struct {
	jobs chan func()
	wg   sync.WaitGroup

	mu     sync.RWMutex
	closed bool
}

func newIntake(queue int) *intake { return &intake{jobs: make(chan func(), queue)} }

// start runs n goroutines taking jobs until close.
func (in *intake) start(n int) {
	for i := 0; i < n; i++ {
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			for job := range in.jobs {
				job()
			}
		}()
	}
}

// offer queues job unless the queue is full or closed; it never waits.
func (in *intake) offer(job func()) bool {
	in.mu.RLock()
	defer in.mu.RUnlock()
	if in.closed {
		return false
	}
	select {
	case in.jobs <- job:
		return true
	default:
		return false
	}
}

// close refuses further offers and returns once every job queued has run.
func (in *intake) close() {
	in.mu.Lock()
	if !in.closed {
		in.closed = true
		close(in.jobs)
	}
	in.mu.Unlock()
	in.wg.Wait()
}

// isClosed reports whether close was called (a refused offer then means shutdown, not overload).
func (in *intake) isClosed() bool {
	in.mu.RLock()
	defer in.mu.RUnlock()
	return in.closed
}
