// Losing a node of a cluster: the faults that SIGKILL one nats-server of three (Config.Nodes), or stop it gracefully,
// and start it again, and what a row of them must show: no request lost but those in flight on the node's clients,
// ok replies resumed within the bound, and a quiet return.

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

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// nodeDown is how long a lost node stays down by default (Config.NodeDown, at most 60% of the measured time after
// the fault): longer than replies may take to resume, so that they cannot wait for its return.
const nodeDown = 12 * time.Second

// The bounds on ok replies after a node's loss (issue 35): the longest run of seconds of sending whose requests got
// no ok reply. JetStream elects a new leader for what a SIGKILLed node led after a randomized election timeout of 4
// to 9 s (nats-server 2.15's raft, not configurable); the frontends send a request again until the new leader takes
// it. A node stopped gracefully (lame-duck mode) hands its leadership over at once.
const (
	killResume     = 10 * time.Second
	gracefulResume = time.Second
	// maxElection is raft's longest election timeout: an election that took longer went to a second round (a split
	// vote), and the kill's bound is then held from it.
	maxElection = 9 * time.Second
)

// ldmConf makes a cluster's nodes close their clients soon in lame-duck mode: 1 s after the hand-over rather than
// 10, one at a time over at most 30 s (the shortest duration nats-server allows; it waits at most 1 s between two).
const ldmConf = "lame_duck_grace_period: 1s\nlame_duck_duration: 30s\n"

// nodeFaults lose, on a fresh cluster each, the node that leads the task stream (killed, or stopped gracefully), then
// each of the two others (in name order): every node once, the stream's leader included, whatever the cluster placed
// where.
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
			Inject: loseNode(pick(0), false)},
		{Name: "node-graceful", NeedsCluster: true, LossExpected: true, Short: true,
			Doc: "stop the cluster node that leads the task stream gracefully (lame-duck mode, SIGUSR2: " +
				"`nats-server --signal ldm`); restarted 12 s after the signal",
			Inject: loseNode(pick(0), true)},
		{Name: "node-second", NeedsCluster: true, LossExpected: true,
			Doc:    "SIGKILL the first (by name) of the two nodes that do not lead the task stream; restarted after 12 s",
			Inject: loseNode(pick(1), false)},
		{Name: "node-third", NeedsCluster: true, LossExpected: true,
			Doc:    "SIGKILL the other node that does not lead the task stream; restarted after 12 s",
			Inject: loseNode(pick(2), false)},
	}
}

// loseNode kills the node pick chooses, or stops it in lame-duck mode (graceful), and starts it again after
// nodeDown (or 60% of the time measured after the fault, if shorter). The row's judge (nodeLoss) holds it to the
// issue's bounds.
func loseNode(pick func(context.Context, *System) (*natsproc.Server, error), graceful bool) func(context.Context, *System) ([]string, []string, error) {
	return func(ctx context.Context, s *System) ([]string, []string, error) {
		node, err := pick(ctx, s)
		if err != nil {
			return nil, nil, err
		}
		led, err := s.ledBy(ctx, node.Name())
		if err != nil {
			return nil, nil, err
		}
		clients, err := connectedClients(node)
		if err != nil {
			return nil, nil, err
		}
		down := min(s.cfg.NodeDown, s.cfg.After*3/5)
		at := time.Now()
		var stopErr error
		var goneS float64
		gone := make(chan struct{})
		go func() {
			defer close(gone)
			if graceful {
				stopErr = node.LameDuck(down)
			} else {
				node.Kill()
			}
			goneS = time.Since(at).Seconds()
		}()
		elected := s.waitLeader(ctx, wire.TaskStream(s.cfg.spec.Name), node, at.Add(down))
		<-gone
		var failures []string
		if stopErr != nil {
			failures = append(failures, stopErr.Error())
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(time.Until(at.Add(down))):
		}
		if err := node.Restart(); err != nil {
			return nil, nil, err
		}
		nl := nodeLoss{clients: clients, sloS: s.cfg.spec.SLOMs / 1000, goneS: goneS, electedS: elected,
			returnS: time.Since(at).Seconds(), resumeS: killResume.Seconds()}
		how := "killed"
		if graceful {
			how, nl.resumeS = "stopped gracefully (lame-duck mode)", gracefulResume.Seconds()
		}
		notes := []string{fmt.Sprintf("%s %s (leading: %s; clients: %s); %s; the node gone after %.1f s, back after %.1f s",
			how, node.Name(), orNone(led), orNone(counted(clients)), nl.electionNote(), goneS, nl.returnS)}
		s.judges = append(s.judges, nl.judge)
		return notes, failures, nil
	}
}

// nodeLoss is what a node fault's judge knows: who was connected to the node, the requests' timeout, and when (in
// seconds from the fault) the node was gone, the task stream had a new leader (-1: not while the node was down)
// and the node was back; resumeS bounds the seconds without an ok reply.
type nodeLoss struct {
	clients                                 []string
	sloS, goneS, electedS, returnS, resumeS float64
}

func (nl nodeLoss) electionNote() string {
	if nl.electedS < 0 {
		return "the task stream had no other leader while the node was down"
	}
	return fmt.Sprintf("the task stream led again after %.1f s", nl.electedS)
}

// judge holds a node-loss row to its bounds: requests lost only if a frontend or loadgen was connected to the node,
// and then only those in flight when the node went; ok replies again within resumeS (for a kill whose election went
// to a second round, within 1 s of it); nothing lost, and violations under 1% (or twice those before the fault), in
// the seconds after the node's return.
func (nl nodeLoss) judge(r Row) (notes, failures []string) {
	exposed := exposed(nl.clients)
	// In flight when the node went: sent within a timeout before the fault, or before the client saw its
	// connection gone (at once for a kill; a node in lame-duck mode closes its clients one by one until it exits).
	const noticeS = 1.0
	for _, at := range r.LostAtS {
		switch {
		case !exposed:
			failures = append(failures, fmt.Sprintf("a request sent at %+.2f s was lost, with no frontend or client on the node", at))
		case at < -nl.sloS-noticeS || at > nl.goneS+noticeS:
			failures = append(failures, fmt.Sprintf("a request sent at %+.2f s was lost: not in flight when the node went", at))
		}
		if len(failures) >= 3 {
			break
		}
	}
	bound := nl.resumeS
	if nl.electedS > maxElection.Seconds() && nl.resumeS == killResume.Seconds() {
		bound = max(bound, nl.electedS+1)
		notes = append(notes, fmt.Sprintf("the stream's election took %.1f s, over raft's %.0f s (a second round): "+
			"ok replies held to %.0f s", nl.electedS, maxElection.Seconds(), bound))
	}
	if float64(r.SilenceS) > bound {
		failures = append(failures, fmt.Sprintf("%d seconds in a row without an ok reply, over %.0f (%s)", r.SilenceS,
			bound, nl.electionNote()))
	}
	// The return: the whole seconds from the node's return on.
	from := int(r.FaultAtS+nl.returnS) + 1
	sent, violations := violationsAfter(r.Series, from)
	lost := 0
	for i := max(0, from); i < len(r.Series); i++ {
		lost += r.Series[i].Lost
	}
	notes = append(notes, fmt.Sprintf("after the node's return: %d violations, %d lost, of %d requests", violations, lost, sent))
	// Quiet: 1% at most, or no worse than twice the seconds before the fault (a busy machine's own violations are not
	// the return's).
	switch {
	case lost > 0:
		failures = append(failures, fmt.Sprintf("the node's return lost %d requests, of %d", lost, sent))
	case sent > 0 && float64(violations) > max(0.01, 2*r.BaselinePct/100)*float64(sent):
		failures = append(failures, fmt.Sprintf("the node's return was not quiet: %d violations of %d requests",
			violations, sent))
	}
	return notes, failures
}

// exposed says whether a node's clients include a frontend or loadgen, whose requests in flight its loss may lose.
func exposed(clients []string) bool {
	return slices.ContainsFunc(clients, func(c string) bool { return c == loadgenName || strings.HasPrefix(c, "fe") })
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

// ledBy names what a node leads: streams and consumers, the KV watches' own consumers counted rather than named.
func (s *System) ledBy(ctx context.Context, node string) ([]string, error) {
	leaders, err := s.leaders(ctx, s.Nodes)
	if err != nil {
		return nil, err
	}
	var led []string
	watchers := 0
	for asset, l := range leaders {
		switch {
		case l != node:
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
	return led, nil
}

// waitLeader polls the nodes other than lost, every 100 ms until end, until one says stream has a leader that is not
// lost, and returns when, in seconds from the call; -1 if none did.
func (s *System) waitLeader(ctx context.Context, stream string, lost *natsproc.Server, end time.Time) float64 {
	start := time.Now()
	others := slices.DeleteFunc(slices.Clone(s.Nodes), func(n *natsproc.Server) bool { return n == lost })
	for time.Now().Before(end) {
		if leaders, err := s.leaders(ctx, others); err == nil {
			if l := leaders[stream]; l != "" && l != lost.Name() {
				return time.Since(start).Seconds()
			}
		}
		select {
		case <-ctx.Done():
			return -1
		case <-time.After(100 * time.Millisecond):
		}
	}
	return -1
}

// leaders maps each stream and consumer (as "stream > consumer") to the name of the node that leads it now, as
// the first of nodes whose monitoring endpoint (/jsz) answers says: no NATS user needed (the deployment's observer
// may not read stream info).
func (s *System) leaders(ctx context.Context, nodes []*natsproc.Server) (map[string]string, error) {
	cl := http.Client{Timeout: 2 * time.Second}
	for _, n := range nodes {
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
	leaders, err := s.leaders(ctx, s.Nodes)
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
