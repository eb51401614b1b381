package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/services/frontend"
)

// resultFaults hold the system to results at least once (docs/faults.md).
var resultFaults = []Fault{
	{Name: "nats-restart-results",
		Doc: "nats-restart, then no request answered late for a result lost on the way: the frontends' late requests " +
			"whose task message was enqueued must all see their leaves come (late_unfinished 0), and no worker may give " +
			"a result up",
		Inject: func(ctx context.Context, s *System) ([]string, []string, error) {
			if err := restartNATS(s); err != nil {
				return nil, nil, err
			}
			s.judges = append(s.judges, func(Row) ([]string, []string) { return s.judgeResults() })
			return nil, nil, nil
		}},
}

// restartNATS kills the server and restarts it on the same store 2 s later.
func restartNATS(s *System) error {
	s.Server.Kill()
	time.Sleep(2 * time.Second)
	return s.Server.Restart()
}

// judgeResults reads the frontends' and workers' counters from their status endpoints once the load is over (20 s
// after the fault: each late request of the fault's time has been watched for its 10 s).
func (s *System) judgeResults() (notes, failures []string) {
	var late, completed, unfinished, unconfirmed, abandoned uint64
	for i := range 2 {
		var st frontend.Stats
		if err := s.status(wire.FrontendStatusSubject(frontendName(i)), &st); err != nil {
			return nil, []string{err.Error()}
		}
		late, completed, unfinished = late+st.Late, completed+st.LateCompleted, unfinished+st.LateUnfinished
	}
	for i := range s.cfg.Workers {
		var reg wire.Registration
		if err := s.status(wire.WorkerStatusSubject(workerName(i)), &reg); err != nil {
			return nil, []string{err.Error()}
		}
		unconfirmed, abandoned = unconfirmed+reg.Stats.Unconfirmed, abandoned+reg.Stats.Abandoned
	}
	notes = append(notes, fmt.Sprintf("frontends: %d late, of them %d completed later and %d never (results lost); "+
		"workers: %d results unconfirmed (redelivered), %d given up", late, completed, unfinished, unconfirmed,
		abandoned))
	if unfinished > 0 {
		failures = append(failures, fmt.Sprintf("%d requests answered late never got all their leaves", unfinished))
	}
	if abandoned > 0 {
		failures = append(failures, fmt.Sprintf("%d results given up unconfirmed", abandoned))
	}
	return notes, failures
}

// status asks a service's status endpoint and decodes its JSON answer into v.
func (s *System) status(subject string, v any) error {
	m, err := s.NC.Request(subject, nil, 5*time.Second)
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	return nil
}
