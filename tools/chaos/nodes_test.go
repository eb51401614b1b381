package chaos

import (
	"strings"
	"testing"
)

// TestJudgeNodeLoss: a node-loss row fails on a request lost with no frontend or client on the node, on one lost
// that was not in flight when the node went, on more seconds in a row without an ok reply than its bound (held from
// the election when raft needed a second round), and on a noisy return; it passes on requests lost in flight on the
// node's clients.
func TestJudgeNodeLoss(t *testing.T) {
	good := Second{Sent: 100, OK: 100}
	series := func(n int, at map[int]Second) []Second {
		out := make([]Second, n)
		for i := range out {
			out[i] = good
			if s, ok := at[i]; ok {
				out[i] = s
			}
		}
		return out
	}
	kill := nodeLoss{sloS: 0.25, electedS: 5, returnS: 12, resumeS: killResume.Seconds()}
	with := func(nl nodeLoss, clients ...string) nodeLoss { nl.clients = clients; return nl }
	graceful := kill
	graceful.goneS, graceful.electedS, graceful.resumeS = 4, 0.1, gracefulResume.Seconds()
	slowElection := kill
	slowElection.electedS = 12.5
	tests := []struct {
		name string
		row  Row
		nl   nodeLoss
		fail string // a failure that must be said; "" passes
	}{
		{"nothing lost, replies on", Row{FaultAtS: 3.2, Series: series(20, nil)}, with(kill, "sleipnir-worker"), ""},
		{"in flight on a frontend of the node", Row{FaultAtS: 3.2, LostAtS: []float64{-0.3, 0.1}, Series: series(20, nil)},
			with(kill, "fe1", "sleipnir-worker"), ""},
		{"in flight on loadgen's connection", Row{FaultAtS: 3.2, LostAtS: []float64{-0.9}, Series: series(20, nil)},
			with(kill, loadgenName), ""},
		{"lost with only workers on the node", Row{FaultAtS: 3.2, LostAtS: []float64{-0.3}, Series: series(20, nil)},
			with(kill, "sleipnir-worker", "sleipnir-planner"), "no frontend or client on the node"},
		{"lost long after the kill", Row{FaultAtS: 3.2, LostAtS: []float64{4}, Series: series(20, nil)},
			with(kill, "fe2"), "not in flight when the node went"},
		{"lost long before the kill", Row{FaultAtS: 3.2, LostAtS: []float64{-3}, Series: series(20, nil)},
			with(kill, "fe2"), "not in flight when the node went"},
		{"lost while lame-duck mode closed the clients", Row{FaultAtS: 3.2, LostAtS: []float64{3.5},
			Series: series(20, nil)}, with(graceful, "fe2"), ""},
		{"ten seconds without an ok reply after a kill", Row{FaultAtS: 3.2, SilenceS: 10, Series: series(20, nil)}, kill, ""},
		{"eleven seconds without an ok reply after a kill", Row{FaultAtS: 3.2, SilenceS: 11, Series: series(20, nil)},
			kill, "11 seconds in a row without an ok reply, over 10"},
		{"a second round of election", Row{FaultAtS: 3.2, SilenceS: 13, Series: series(20, nil)}, slowElection, ""},
		{"slower than a second round of election", Row{FaultAtS: 3.2, SilenceS: 14, Series: series(20, nil)},
			slowElection, "over 14"},
		{"two seconds without an ok reply after a graceful stop", Row{FaultAtS: 3.2, SilenceS: 2,
			Series: series(20, nil)}, graceful, "2 seconds in a row without an ok reply, over 1"},
		{"a noisy return", Row{FaultAtS: 3.2, Series: series(20, map[int]Second{17: {Sent: 100, OK: 90, Violations: 10}})},
			kill, "return was not quiet"},
		{"a return as noisy as the seconds before the fault", Row{FaultAtS: 3.2, BaselinePct: 6,
			Series: series(20, map[int]Second{17: {Sent: 100, OK: 90, Violations: 10}})}, kill, ""},
		{"a return noisier than twice the seconds before the fault", Row{FaultAtS: 3.2, BaselinePct: 3,
			Series: series(20, map[int]Second{17: {Sent: 100, OK: 60, Violations: 40}})}, kill, "return was not quiet"},
		{"lost after the return", Row{FaultAtS: 3.2, Series: series(20, map[int]Second{17: {Sent: 100, OK: 99, Lost: 1,
			Violations: 1}})}, kill, "the node's return lost 1 requests"},
		{"violations before the return are the kill's", Row{FaultAtS: 3.2,
			Series: series(20, map[int]Second{4: {Sent: 100, OK: 50, Violations: 50}})}, kill, ""},
	}
	for _, tc := range tests {
		_, failures := tc.nl.judge(tc.row)
		got := strings.Join(failures, "; ")
		if tc.fail == "" && got != "" || tc.fail != "" && !strings.Contains(got, tc.fail) {
			t.Errorf("%s: failures %q, want %q", tc.name, got, tc.fail)
		}
	}
}

// TestSilence: seconds without an ok reply are counted from the fault's on, and the longest run of them; a second
// with ok replies ends a run.
func TestSilence(t *testing.T) {
	ok, none := Second{Sent: 100, OK: 100}, Second{Sent: 100}
	series := []Second{none, ok, none, none, ok, none, none, none, ok, none}
	if n, longest := silence(series, 1.5); n != 6 || longest != 3 {
		t.Errorf("silence: %d seconds, %d in a row; want 6 and 3", n, longest)
	}
}

func TestCounted(t *testing.T) {
	got := strings.Join(counted([]string{"fe1", "sleipnir-worker", "sleipnir-worker", "sleipnir-worker", "x"}), ", ")
	if want := "fe1, sleipnir-worker x3, x"; got != want {
		t.Errorf("counted: %q, want %q", got, want)
	}
}
