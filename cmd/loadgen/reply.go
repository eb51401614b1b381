package main

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/ocr"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// onReply records the first reply of a request as its outcome. A second reply to the same attempt, which must never
// happen, is counted as a duplicate; one after the request was counted lost as a late reply; one to an attempt of
// a request another attempt had answered as an extra reply.
func (r *run) onReply(m *nats.Msg) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.attempts[m.Subject]
	if !ok {
		r.sum.Errors++
		if r.sum.FirstError == "" {
			r.sum.FirstError = "a reply to no request sent: " + m.Subject
		}
		return
	}
	a.replies++
	p := a.req
	if !p.settled() && now.After(p.due) {
		// Past its loss time: lost, whether or not the drain has swept it yet.
		r.loseLocked(p)
	}
	if r.notOutcomeLocked(a) {
		return
	}
	noResponders := len(m.Data) == 0 && m.Header.Get("Status") == "503"
	if noResponders && r.retryLocked(p, now) {
		return
	}
	if noResponders {
		r.noRespondersLocked(p)
		return
	}
	p.answered = true
	if p.warmup {
		return
	}
	r.outcomeLocked(p, m.Data, now)
}

// notOutcomeLocked counts a reply to a that cannot be its request's outcome (a late, duplicate or extra reply),
// and says whether it was one.
func (r *run) notOutcomeLocked(a *attempt) bool {
	p := a.req
	switch {
	case p.lost:
		if !p.warmup {
			r.sum.LateReplies++
		}
	case a.replies > 1:
		if !p.warmup {
			r.sum.Duplicates++
			r.series[p.second].Duplicates++
		}
	case p.answered:
		if !p.warmup {
			r.sum.ExtraReplies++
		}
	default:
		return false
	}
	return true
}

// outcomeLocked counts the reply (data) that is the outcome of p, a measured request, by its status.
func (r *run) outcomeLocked(p *pendingReq, data []byte, now time.Time) {
	sec := &r.series[p.second]
	var rep wire.InferReply
	err := wire.UnmarshalMsgpack(data, &rep)
	if lat := float64(now.Sub(p.sent).Microseconds()) / 1000; err == nil && rep.Status == wire.StatusOverloaded {
		r.refusedLat = append(r.refusedLat, lat)
	} else {
		r.latencies = append(r.latencies, lat)
	}
	if err == nil && rep.Status == wire.StatusOK {
		sec.OK++
	} else {
		sec.Violations++
	}
	if err != nil {
		r.sum.Errors++
		if r.sum.FirstError == "" {
			r.sum.FirstError = "undecodable reply: " + err.Error()
		}
		return
	}
	switch rep.Status {
	case wire.StatusOK:
		r.sum.OK++
		r.accSum, r.accN = r.accSum+rep.Accuracy, r.accN+1
		if r.images != nil {
			r.scoreLocked(p, &rep)
		}
	case wire.StatusPartial:
		r.sum.Partial++
		r.accSum, r.accN = r.accSum+rep.Accuracy, r.accN+1
	case wire.StatusDegraded:
		r.sum.Degraded++
		r.accSum, r.accN = r.accSum+rep.Accuracy, r.accN+1
	case wire.StatusDropped:
		r.sum.Dropped++
	case wire.StatusLate:
		r.sum.Late++
	case wire.StatusOverloaded:
		r.sum.Refused++
		sec.Refused++
	default:
		r.sum.Errors++
		if r.sum.FirstError == "" {
			r.sum.FirstError = rep.Error
		}
	}
}

// scoreLocked checks an ok reply's lines against the ground truth of the image its request carried.
func (r *run) scoreLocked(p *pendingReq, rep *wire.InferReply) {
	truth := r.images.Documents[p.doc].Lines
	sc := ocr.ScorePage(ocrReads(rep.Results), truth)
	r.truth.exact += sc.ExactLines
	r.truth.lines += sc.Lines
	r.truth.predicted += rep.Accuracy * float64(sc.Lines)
	r.truth.pageChars += sc.CharAccuracy
	r.truth.pages++
}

// loseLocked counts p lost: no reply to any of its attempts by its loss time.
func (r *run) loseLocked(p *pendingReq) {
	p.lost = true
	if !p.warmup {
		r.sum.Lost++
		r.series[p.second].Lost++
		r.series[p.second].Violations++
	}
}
