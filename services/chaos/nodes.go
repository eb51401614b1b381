// Losing a node of a cluster: the faults that SIGKILL one nats-server of three (Config.Nodes) and start it again,
// and what a row of them must show: no request lost but those in flight on the killed node's clients, replies
// resumed within Config.MaxRecovery, and a quiet return.

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/natsproc"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// nodeDown is how long a killed node stays down by default (Config.NodeDown, at most 60% of the measured time after
// the fault): longer than replies may take to resume, so that they cannot wait for its return. JetStream elects a new
// leader for what the node led after a randomized election timeout of 4 to 9 s (nats-server 2.15's raft, not
// configurable), twice that when a first election fails.
const nodeDown = 12 * time.Second

// nodeFaults kill, on a fresh cluster each, the node that leads the task stream, then each of the two others (in
// name order): every node once, the stream's leader included, whatever the cluster placed where.
func nodeFaults() []Fault {
	pick := func(nth int) func(ctx context.Context, s *System) (*natsproc.Server, error) {
		return func(ctx context.Context, s *System) (*natsproc.Server, error) {
			leader, err := s.streamLeader(ctx, wire.TaskStream(s.cfg.spec.Name))
			if err != nil {
				return nil, err
			}
			order := []*natsproc.Server{leader}
			for _, n := range s.Nodes {
				if n != leader {
					order = append(order, n)
				}
			}
			if nth >= len(order) {
				return nil, fmt.Errorf("no node %d of %d", nth+1, len(order))
			}
			return order[nth], nil
		}
	}
	return []Fault{
		{Name: "node-stream-leader", NeedsCluster: true, LossExpected: true, Short: true,
			Doc:    "SIGKILL the cluster node that leads the task stream; restarted after 12 s",
			Inject: killNode(pick(0))},
		{Name: "node-second", NeedsCluster: true, LossExpected: true,
			Doc:    "SIGKILL the first (by name) of the two nodes that do not lead the task stream; restarted after 12 s",
			Inject: killNode(pick(1))},
		{Name: "node-third", NeedsCluster: true, LossExpected: true,
			Doc:    "SIGKILL the other node that does not lead the task stream; restarted after 12 s",
			Inject: killNode(pick(2))},
	}
}

// killNode kills the node pick chooses and starts it again after nodeDown (or half the time measured after the
// fault, if shorter). The row's judge holds it to the bounds: lost requests only if a frontend or the load
// generator was connected to the node, and then only those in flight at the kill; ok replies again within
// MaxSilence; nothing lost, and violations under 1%, in the seconds after the node's return.
func killNode(pick func(context.Context, *System) (*natsproc.Server, error)) func(context.Context, *System) ([]string, []string, error) {
	return func(ctx context.Context, s *System) ([]string, []string, error) {
		node, err := pick(ctx, s)
		if err != nil {
			return nil, nil, err
		}
		leaders, err := s.leaders(ctx)
		if err != nil {
			return nil, nil, err
		}
		var led []string
		watchers := 0 // the KV watches' own consumers, counted rather than named
		for asset, l := range leaders {
			switch {
			case l != node.Name():
			case strings.HasPrefix(asset, wire.KVStream+" > "):
				watchers++
			default:
				led = append(led, asset)
			}
		}
		slices.Sort(led)
		if watchers > 0 {
			led = append(led, fmt.Sprintf("%d KV watches' consumers", watchers))
		}
		clients, err := connectedClients(node)
		if err != nil {
			return nil, nil, err
		}
		down := min(s.cfg.NodeDown, s.cfg.After*3/5)
		node.Kill()
		killedAt := time.Now()
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(down):
		}
		if err := node.Restart(); err != nil {
			return nil, nil, err
		}
		returnAt := time.Since(killedAt).Seconds()
		notes := []string{fmt.Sprintf("killed %s (leading: %s; clients: %s), back after %.1f s", node.Name(),
			orNone(led), orNone(counted(clients)), returnAt)}
		s.judges = append(s.judges, func(r Row) ([]string, []string) {
			return judgeNodeLoss(r, clients, s.cfg.spec.SLOMs/1000, returnAt, s.cfg.MaxSilence.Seconds())
		})
		return notes, nil, nil
	}
}

// judgeNodeLoss holds a node-loss row to its bounds; clients are who was connected to the killed node, sloS the
// requests' timeout, returnAtS when the node was back (seconds from the fault).
func judgeNodeLoss(r Row, clients []string, sloS, returnAtS, maxResumeS float64) (notes, failures []string) {
	exposed := slices.ContainsFunc(clients, func(c string) bool { return c == loadgenName || strings.HasPrefix(c, "fe") })
	// In flight at the kill: sent within a timeout before it, or before the client saw its connection gone.
	const noticeS = 1.0
	for _, at := range r.LostAtS {
		switch {
		case !exposed:
			failures = append(failures, fmt.Sprintf("a request sent at %+.2f s was lost, with no frontend or client on the node", at))
		case at < -sloS-noticeS || at > noticeS:
			failures = append(failures, fmt.Sprintf("a request sent at %+.2f s was lost: not in flight at the kill", at))
		}
		if len(failures) >= 3 {
			break
		}
	}
	if float64(r.NoReplyS) > maxResumeS {
		failures = append(failures, fmt.Sprintf("%d seconds without an ok reply, over %.0f", r.NoReplyS, maxResumeS))
	}
	// The return: the whole seconds from the node's return on.
	from := int(r.FaultAtS+returnAtS) + 1
	sent, violations := violationsAfter(r.Series, from)
	lost := 0
	for i := max(0, from); i < len(r.Series); i++ {
		lost += r.Series[i].Lost
	}
	notes = append(notes, fmt.Sprintf("after the node's return: %d violations, %d lost, of %d requests", violations, lost, sent))
	if lost > 0 || sent > 0 && float64(violations) > 0.01*float64(sent) {
		failures = append(failures, fmt.Sprintf("the node's return was not quiet: %d violations, %d lost, of %d requests",
			violations, lost, sent))
	}
	return notes, failures
}

// counted writes names that repeat once, with their count: "sleipnir-worker x4".
func counted(names []string) []string {
	var out []string
	for i := 0; i < len(names); {
		j := i
		for j < len(names) && names[j] == names[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s x%d", names[i], j-i))
		} else {
			out = append(out, names[i])
		}
		i = j
	}
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// leaders maps each stream and consumer (as "stream > consumer") to the name of the node that leads it now, as
// the first live node's monitoring endpoint (/jsz) says: no NATS user needed (the deployment's observer may not
// read stream info).
func (s *System) leaders(ctx context.Context) (map[string]string, error) {
	cl := http.Client{Timeout: 2 * time.Second}
	for _, n := range s.Nodes {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.MonitorURL()+"/jsz?consumers=true", nil)
		if err != nil {
			return nil, err
		}
		resp, err := cl.Do(req)
		if err != nil {
			continue // a node down
		}
		type led struct {
			Name    string `json:"name"`
			Cluster *struct {
				Leader string `json:"leader"`
			} `json:"cluster"`
		}
		var jsz struct {
			Accounts []struct {
				Streams []struct {
					led
					Consumers []led `json:"consumer_detail"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}
		err = json.NewDecoder(resp.Body).Decode(&jsz)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("jsz of %s: %w", n.Name(), err)
		}
		out := map[string]string{}
		for _, a := range jsz.Accounts {
			for _, st := range a.Streams {
				if st.Cluster != nil {
					out[st.Name] = st.Cluster.Leader
				}
				for _, c := range st.Consumers {
					if c.Cluster != nil {
						out[st.Name+" > "+c.Name] = c.Cluster.Leader
					}
				}
			}
		}
		return out, nil
	}
	return nil, errors.New("no node answered /jsz")
}

// streamLeader is the node that leads a stream now.
func (s *System) streamLeader(ctx context.Context, stream string) (*natsproc.Server, error) {
	leaders, err := s.leaders(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range s.Nodes {
		if n.Name() == leaders[stream] {
			return n, nil
		}
	}
	return nil, fmt.Errorf("stream %s is led by %q, not one of the suite's nodes", stream, leaders[stream])
}

// loadgenName is the connection name loadgen gives itself.
const loadgenName = "sleipnir-loadgen"

// connectedClients names the connections a node holds, from its monitoring endpoint: frontends by id (from their
// result subscription), the load generator by its name, the others by theirs.
func connectedClients(node *natsproc.Server) ([]string, error) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(node.MonitorURL() + "/connz?subs=1&limit=4096")
	if err != nil {
		return nil, fmt.Errorf("connections of %s: %w", node.Name(), err)
	}
	defer resp.Body.Close()
	var connz struct {
		Connections []struct {
			Name string   `json:"name"`
			Subs []string `json:"subscriptions_list"`
		} `json:"connections"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&connz); err != nil {
		return nil, fmt.Errorf("connections of %s: %w", node.Name(), err)
	}
	var names []string
	for _, c := range connz.Connections {
		name := c.Name
		for _, sub := range c.Subs {
			if id, ok := strings.CutPrefix(sub, wire.ResultPrefix); ok {
				name = id
			}
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}
