package worker

import (
	"sync"
	"time"
)

// inProgress tells JetStream that the messages of a variant's unsettled batches are being worked on, every third of
// the ack wait, so that it does not hand them to another replica while this one is alive: a batch running long, or
// waiting long for its publishes' acknowledgements or its results' confirmation. One timer for all of the
// variant's batches, armed while any is unsettled, instead of a timer, a closure and a lock made per batch: nearly
// every batch is settled long before the first mark, and those were on every hop's path (BenchmarkHop). A batch is
// marked within a third of the ack wait of its start (the timer, if armed before, fires sooner), then every third.
type inProgress struct {
	mu      sync.Mutex
	batches []flight // the unsettled batches, in no order
	next    uint64   // the id of the last batch added
	timer   *time.Timer
	armed   bool          // the timer will fire
	wait    time.Duration // the ack wait the timer was armed with
}

// flight is one unsettled batch: its messages, and those carried to the next batch (they wait too).
type flight struct {
	id   uint64
	msgs []*inbound
}

// add counts msgs in progress until remove is called with the id it gives; wait is the consumer's ack wait.
func (p *inProgress) add(msgs []*inbound, wait time.Duration) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	p.batches = append(p.batches, flight{id: p.next, msgs: msgs})
	switch {
	case p.timer == nil:
		p.timer = time.AfterFunc(wait/3, p.mark)
	case !p.armed || wait < p.wait: // a shorter ack wait (the consumer changed): the first mark is due sooner
		p.timer.Reset(wait / 3)
	default:
		return p.next
	}
	p.armed, p.wait = true, wait
	return p.next
}

// remove ends the marks of the batch added under id (settled, or handed back).
func (p *inProgress) remove(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.batches {
		if f.id == id {
			last := len(p.batches) - 1
			p.batches[i] = p.batches[last]
			p.batches[last] = flight{} // its messages are not held
			p.batches = p.batches[:last]
			return
		}
	}
}

// mark marks every unsettled batch's messages in progress, and arms the timer again while there are any.
func (p *inProgress) mark() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.batches) == 0 {
		p.armed = false
		return
	}
	for _, f := range p.batches {
		for _, in := range f.msgs {
			_ = in.msg.InProgress()
		}
	}
	p.timer.Reset(p.wait / 3)
}
