package frontend

import (
	"context"
	"sync"
)

// intake is the bounded hand-off between the request callbacks and a fixed pool of goroutines that decode, publish
// and wait for JetStream's acknowledgement. The NATS callback serves every request of the connection in turn, so it
// must never wait on JetStream: it offers the request here and, when the queue is full, refuses it at once instead of
// letting a backlog grow.
//
// Requests are decoded and acknowledged concurrently but sent to JetStream in the order they were offered: each job
// gets a turn, which it takes (after the job before it has sent, or given up its turn) to send its task message.
// Variants' queues then keep the order requests arrived in.
type intake struct {
	jobs chan queued
	wg   sync.WaitGroup

	mu     sync.Mutex
	closed bool
	last   chan struct{} // closed once the last job offered has sent or given up its turn
}

type queued struct {
	job  func(*turn)
	turn *turn
}

// turn orders the sends of the jobs: prev is closed once every earlier job has sent or given up its turn; closing
// next says the same of this one.
type turn struct {
	prev <-chan struct{}
	next chan struct{}
	done bool
}

// take waits for the turn; false if ctx ended first (the turn is then passed on by the intake once prev is closed).
func (t *turn) take(ctx context.Context) bool {
	select {
	case <-t.prev:
		return true
	case <-ctx.Done():
		return false
	}
}

// pass hands the turn on; the caller has taken it.
func (t *turn) pass() {
	if !t.done {
		t.done = true
		close(t.next)
	}
}

func newIntake(queue int) *intake {
	done := make(chan struct{})
	close(done)
	return &intake{jobs: make(chan queued, queue), last: done}
}

// start runs n goroutines taking jobs until close.
func (in *intake) start(n int) {
	for i := 0; i < n; i++ {
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			for q := range in.jobs {
				q.job(q.turn)
				if !q.turn.done {
					// The job did not send: the jobs after it may, once those before it have.
					<-q.turn.prev
					q.turn.pass()
				}
			}
		}()
	}
}

// offer queues job unless the queue is full or closed; it never waits. Jobs are taken in the order offered, so the
// one holding the previous turn is always running or done when a job waits for its turn.
func (in *intake) offer(job func(*turn)) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return false
	}
	t := &turn{prev: in.last, next: make(chan struct{})}
	select {
	case in.jobs <- queued{job: job, turn: t}:
		in.last = t.next
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
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.closed
}
