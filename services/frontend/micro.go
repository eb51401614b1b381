// The frontend as a NATS micro service: `nats micro list|info|stats` show it with an infer endpoint per pipeline.

package frontend

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// microService answers the micro protocol ($SRV.PING, $SRV.INFO, $SRV.STATS, with micro's types and subjects) for
// the frontend itself, rather than through micro.AddService, for two reasons. micro counts an error only when the
// handler has responded before it returns, and a frontend replies later (at completion or at the deadline), so
// micro's counters would miss nearly every error. And micro's endpoints would be the data path, one subscription per
// pipeline, while the one wildcard subscription is what answers a request for an unknown pipeline: next to it,
// they would get every request twice (two queue groups) or share them at random (one). The data path stays as it
// was; every NATS reply is counted here, on its pipeline's endpoint.
type microService struct {
	f       *Frontend
	id      string
	started time.Time

	mu        sync.Mutex
	endpoints map[string]*micro.EndpointStats // by pipeline
}

func newMicroService(f *Frontend) *microService {
	return &microService{f: f, id: f.cfg.ID + "-" + f.boot, started: time.Now().UTC(),
		endpoints: map[string]*micro.EndpointStats{}}
}

func (s *microService) identity() micro.ServiceIdentity {
	return micro.ServiceIdentity{Name: wire.ServiceFrontend, ID: s.id, Version: wire.ServiceVersion,
		Metadata: map[string]string{"frontend": s.f.cfg.ID}}
}

// subscribe answers the three verbs on their three subjects each (all services, this kind, this instance), as
// micro does; the returned subscriptions end the service.
func (s *microService) subscribe(nc *nats.Conn) ([]*nats.Subscription, error) {
	handlers := map[micro.Verb]func() any{
		micro.PingVerb:  func() any { return micro.Ping{ServiceIdentity: s.identity(), Type: micro.PingResponseType} },
		micro.InfoVerb:  s.info,
		micro.StatsVerb: s.stats,
	}
	// The status endpoint: the frontend's counters (Stats), as the planner's and the workers' status endpoints.
	status, err := nc.Subscribe(wire.FrontendStatusSubject(s.f.cfg.ID), func(m *nats.Msg) {
		data, _ := json.Marshal(s.f.Stats())
		_ = m.Respond(data)
	})
	if err != nil {
		return nil, err
	}
	subs := []*nats.Subscription{status}
	for verb, h := range handlers {
		for _, kind := range [][2]string{{"", ""}, {wire.ServiceFrontend, ""}, {wire.ServiceFrontend, s.id}} {
			subject, err := micro.ControlSubject(verb, kind[0], kind[1])
			if err != nil {
				return subs, err
			}
			sub, err := bus.Subscribe(nc, subject, "", func(m *nats.Msg) {
				data, _ := json.Marshal(h())
				_ = m.Respond(data)
			}, bus.ControlPending, &s.f.droppedControl)
			if err != nil {
				return subs, err
			}
			subs = append(subs, sub)
		}
	}
	return subs, nil
}

func (s *microService) info() any {
	var eps []micro.EndpointInfo
	for _, p := range s.f.Pipelines() {
		eps = append(eps, micro.EndpointInfo{Name: p, Subject: wire.InferSubject(p), QueueGroup: wire.QueueFrontend,
			Metadata: map[string]string{"pipeline": p}})
	}
	return micro.Info{ServiceIdentity: s.identity(), Type: micro.InfoResponseType,
		Description: "Sleipnir frontend: inference requests per pipeline, answered once each", Endpoints: eps}
}

func (s *microService) stats() any {
	st := micro.Stats{ServiceIdentity: s.identity(), Type: micro.StatsResponseType, Started: s.started}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.f.Pipelines() {
		e := micro.EndpointStats{Name: p, Subject: wire.InferSubject(p), QueueGroup: wire.QueueFrontend}
		if c := s.endpoints[p]; c != nil {
			e = *c
		}
		st.Endpoints = append(st.Endpoints, &e)
	}
	return st
}

// replied counts a NATS reply on its pipeline's endpoint: an error reply (status error, with the micro error
// headers) is an error; the processing time is the request's latency in the frontend.
func (s *microService) replied(pipelineName string, rep *wire.InferReply) {
	if spec, _ := s.f.lookup(pipelineName); spec == nil {
		return // no endpoint: an unknown pipeline
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.endpoints[pipelineName]
	if e == nil {
		e = &micro.EndpointStats{Name: pipelineName, Subject: wire.InferSubject(pipelineName), QueueGroup: wire.QueueFrontend}
		s.endpoints[pipelineName] = e
	}
	e.NumRequests++
	e.ProcessingTime += time.Duration(rep.LatencyMs * float64(time.Millisecond))
	e.AverageProcessingTime = e.ProcessingTime / time.Duration(e.NumRequests)
	if rep.Status == wire.StatusError || rep.Status == wire.StatusOverloaded {
		e.NumErrors++
		e.LastError = rep.Error
	}
}

// setServiceError puts micro's error headers on an error reply: the text, and as the code the HTTP status the same
// reply gets from the HTTP API (httpStatus; refusal: why the request was refused, if it was).
func setServiceError(h nats.Header, rep *wire.InferReply, refusal error) {
	text := rep.Error
	if text == "" {
		text = "every item of the request failed" // micro wants a description
	}
	code, _ := httpStatus(rep, refusal)
	h.Set(wire.HeaderServiceError, text)
	h.Set(wire.HeaderServiceErrorCode, strconv.Itoa(code))
}

// pipelineOf is the pipeline a NATS request's subject names.
func pipelineOf(subject string) string { return strings.TrimPrefix(subject, wire.InferPrefix) }
