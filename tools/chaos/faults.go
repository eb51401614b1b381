package chaos

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/plan"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Registry is every fault, in the table's order. A new fault is one more entry: a name and what Inject does
// (restarts included); the load, the counting and the checks are the suite's.
var Registry = slices.Concat(processFaults, resultFaults, nodeFaults())

// processFaults are the faults of one server's deployment: processes killed, crafted and forged messages.
var processFaults = []Fault{
	{Name: "worker-kill", Short: true, Doc: "SIGKILL two active workers mid-load; restarted after 2 s",
		Inject: func(ctx context.Context, s *System) ([]string, []string, error) {
			victims, err := s.activeWorkers(ctx, 2)
			if err != nil {
				return nil, nil, err
			}
			for _, w := range victims {
				if err := s.Kill(w.Worker); err != nil {
					return nil, nil, err
				}
			}
			time.Sleep(2 * time.Second)
			var notes []string
			for _, w := range victims {
				notes = append(notes, fmt.Sprintf("killed %s (%s/%s)", w.Worker, w.Task, w.Variant))
				if err := s.Start(w.Worker); err != nil {
					return nil, nil, err
				}
			}
			return notes, nil, nil
		}},
	{Name: "planner-kill", Doc: "SIGKILL the planner; restarted after 3 s",
		Inject: func(ctx context.Context, s *System) ([]string, []string, error) {
			return nil, nil, s.KillAndRestart(ctx, "planner", 3*time.Second)
		}},
	{Name: "frontend-kill", LossExpected: true,
		Doc: "SIGKILL fe1 (fe2 keeps serving); not restarted: the requests fe1 had accepted and not answered are lost",
		Inject: func(ctx context.Context, s *System) ([]string, []string, error) {
			return []string{"fe1 stays down; its in-flight requests have no one to answer them"}, nil, s.Kill("fe1")
		}},
	{Name: "nats-restart", Doc: "SIGKILL nats-server; restarted on the same store after 2 s",
		Inject: func(ctx context.Context, s *System) ([]string, []string, error) {
			return nil, nil, restartNATS(s)
		}},
	{Name: "frontend-same-id", LossExpected: true,
		Doc: "crafted (2): SIGKILL fe1 and restart it under the same --id after 1 s (its request ids start over); " +
			"the requests fe1 held at the kill are lost as in frontend-kill, those it takes after its restart must be served",
		Inject: func(ctx context.Context, s *System) ([]string, []string, error) {
			if err := s.KillAndRestart(ctx, "fe1", time.Second); err != nil {
				return nil, nil, err
			}
			// The restarted frontend's requests only fail once it serves again: ask it directly, several times.
			return s.askThrough(ctx, "fe1")
		}},
	{Name: "crafted-bytes-shape", Short: true,
		Doc: "crafted (1): a BYTES tensor whose shape claims [2147483647] and whose data holds one element",
		Inject: func(ctx context.Context, s *System) ([]string, []string, error) {
			data := binary.LittleEndian.AppendUint32(nil, 1)
			data = append(data, 'x')
			req, _ := msgpack.Marshal(&wire.InferRequest{Inputs: []wire.Tensor{{Name: "image", Datatype: wire.DatatypeBytes,
				Shape: []int64{2147483647}, Data: data}}})
			return s.expectAnswer(req, nil, 5*time.Second)
		}},
	{Name: "crafted-timeout", Doc: "crafted (6): a request with Sleipnir-Timeout: 2500000h",
		Inject: func(ctx context.Context, s *System) ([]string, []string, error) {
			hdr := nats.Header{}
			hdr.Set(wire.HeaderTimeout, "2500000h")
			return s.expectAnswer(probeRequest(), hdr, 10*time.Second)
		}},
	poisonFault,
	{Name: "forged-result", NeedsAuth: true,
		Doc: "a client publishes a result to fe1's result subject: the server must refuse it",
		Inject: func(ctx context.Context, s *System) ([]string, []string, error) {
			data, _ := msgpack.Marshal(&wire.ResultMessage{RequestID: "fe1-1", Items: []wire.ItemResult{
				{ID: wire.RootItemID, Den: 1, Status: wire.ItemOK}}})
			return s.expectRefused(wire.ResultSubject("fe1"), data)
		}},
	{Name: "forged-plan", NeedsAuth: true,
		Doc: "a client writes plan.<pipeline> in the KV bucket: the server must refuse it",
		Inject: func(ctx context.Context, s *System) ([]string, []string, error) {
			data, _ := json.Marshal(&plan.Plan{Epoch: 1 << 40, Mode: "forged"})
			return s.expectRefused(wire.KVSubject(wire.PlanKey(s.cfg.spec.Name)), data)
		}},
}

// Select returns the named faults in the registry's order; if names is empty, those of the deployment (the node
// faults on a cluster, the others on one server), with short only the short ones.
func Select(names []string, short, cluster bool) ([]Fault, error) {
	for _, n := range names {
		if !slices.ContainsFunc(Registry, func(f Fault) bool { return f.Name == n }) {
			return nil, fmt.Errorf("unknown fault %q (known: %s)", n, strings.Join(Names(), ", "))
		}
	}
	var out []Fault
	for _, f := range Registry {
		if len(names) > 0 && slices.Contains(names, f.Name) ||
			len(names) == 0 && (!short || f.Short) && f.NeedsCluster == cluster {
			out = append(out, f)
		}
	}
	return out, nil
}

// Names lists the registry's faults.
func Names() []string {
	var out []string
	for _, f := range Registry {
		out = append(out, f.Name)
	}
	return out
}

// activeWorkers are n workers the plan in force gives a variant, read from their assignments in the KV bucket.
func (s *System) activeWorkers(ctx context.Context, n int) ([]plan.Assignment, error) {
	active, err := s.assignedWorkers(ctx)
	if err != nil {
		return nil, err
	}
	if len(active) < n {
		return nil, fmt.Errorf("%d active workers, want %d to kill", len(active), n)
	}
	return active[:n], nil
}

// assignedWorkers are the workers the plans in force give a variant, the first pipeline's root task's replicas
// first (every request of it goes through them).
func (s *System) assignedWorkers(ctx context.Context) ([]plan.Assignment, error) {
	js, err := jetstream.New(s.NC)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, wire.Bucket)
	if err != nil {
		return nil, err
	}
	var active []plan.Assignment
	for i := 0; i < s.cfg.Workers; i++ {
		e, err := kv.Get(ctx, wire.AssignKey(workerName(i)))
		if err != nil {
			continue
		}
		var a plan.Assignment
		if json.Unmarshal(e.Value(), &a) == nil && !a.Idle() {
			a.Worker = workerName(i)
			active = append(active, a)
		}
	}
	root := s.cfg.spec.Root().Name
	slices.SortStableFunc(active, func(a, b plan.Assignment) int {
		if (a.Task == root) != (b.Task == root) {
			if a.Task == root {
				return -1
			}
			return 1
		}
		return 0
	})
	return active, nil
}

// expectAnswer sends a crafted request: it must be answered (any status, refusals included) within wait.
func (s *System) expectAnswer(data []byte, hdr nats.Header, wait time.Duration) ([]string, []string, error) {
	rep, err := s.Ask(s.cfg.spec.Name, data, hdr, wait)
	if err != nil {
		return nil, []string{fmt.Sprintf("the crafted request got no reply within %v: %v", wait, err)}, nil
	}
	note := "crafted request answered: " + rep.Status
	if rep.Error != "" {
		note += ": " + rep.Error
	}
	return []string{note}, nil, nil
}

// askThrough sends requests until one reaches the named frontend (replies carry its request ids) and reports
// what they got; every one must be answered ok.
func (s *System) askThrough(ctx context.Context, frontend string) ([]string, []string, error) {
	req := probeRequest()
	var statuses []string
	var failures []string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && len(statuses) < 5; {
		rep, err := s.Ask(s.cfg.spec.Name, req, nil, 2*time.Second)
		switch {
		case err != nil:
			failures = append(failures, "a request got no reply: "+err.Error())
		case strings.HasPrefix(rep.RequestID, frontend+"-"):
			statuses = append(statuses, rep.RequestID+" "+rep.Status)
			if rep.Status != wire.StatusOK {
				f := fmt.Sprintf("%s answered %s %s", rep.RequestID, rep.Status, rep.Error)
				failures = append(failures, strings.TrimSpace(f))
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if len(statuses) == 0 {
		failures = append(failures, "no request reached "+frontend+" after its restart within 10 s")
	}
	return []string{"through the restarted " + frontend + ": " + strings.Join(statuses, ", ")}, failures, nil
}

// expectRefused publishes a forged message as the client user: the server must answer with a permissions
// violation.
func (s *System) expectRefused(subject string, data []byte) ([]string, []string, error) {
	opts, err := s.cfg.Auth.options(RoleClient, RoleClient)
	if err != nil {
		return nil, nil, err
	}
	refused := make(chan error, 1)
	nc, err := nats.Connect(s.Server.URL(), append(opts, nats.Name("sleipnir-chaos-forger"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				select {
				case refused <- err:
				default:
				}
			}
		}))...)
	if err != nil {
		return nil, nil, err
	}
	defer nc.Close()
	if err := nc.Publish(subject, data); err != nil {
		return nil, nil, err
	}
	_ = nc.Flush()
	select {
	case err := <-refused:
		return []string{"refused: " + err.Error()}, nil, nil
	case <-time.After(2 * time.Second):
		return nil, []string{"the server accepted a forged publish to " + subject}, nil
	}
}
