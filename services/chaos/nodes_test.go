package chaos

import (
	"strings"
	"testing"
)

// TestJudgeNodeLoss: a node-loss row fails on a request lost with no frontend or client on the node, on one lost
// that was not in flight at the kill, on more than 5 s without an ok reply, and on a noisy return; it passes on
// requests lost in flight on the node's clients.
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
	tests := []struct {
		name    string
		row     Row
		clients []string
		fail    string // a failure that must be said; "" passes
	}{
		{"nothing lost, replies on", Row{FaultAtS: 3.2, Series: series(12, nil)}, []string{"sleipnir-worker"}, ""},
		{"in flight on a frontend of the node", Row{FaultAtS: 3.2, LostAtS: []float64{-0.3, 0.1}, Series: series(12, nil)},
			[]string{"fe1", "sleipnir-worker"}, ""},
		{"in flight on loadgen's connection", Row{FaultAtS: 3.2, LostAtS: []float64{-0.9}, Series: series(12, nil)},
			[]string{loadgenName}, ""},
		{"lost with only workers on the node", Row{FaultAtS: 3.2, LostAtS: []float64{-0.3}, Series: series(12, nil)},
			[]string{"sleipnir-worker", "sleipnir-planner"}, "no frontend or client on the node"},
		{"lost long after the kill", Row{FaultAtS: 3.2, LostAtS: []float64{4}, Series: series(12, nil)},
			[]string{"fe2"}, "not in flight at the kill"},
		{"lost long before the kill", Row{FaultAtS: 3.2, LostAtS: []float64{-3}, Series: series(12, nil)},
			[]string{"fe2"}, "not in flight at the kill"},
		{"six seconds without an ok reply", Row{FaultAtS: 3.2, NoReplyS: 6, Series: series(12, nil)}, nil,
			"seconds without an ok reply"},
		{"a noisy return", Row{FaultAtS: 3.2, Series: series(12, map[int]Second{9: {Sent: 100, OK: 90, Violations: 10}})},
			nil, "return was not quiet"},
		{"violations before the return are the kill's", Row{FaultAtS: 3.2,
			Series: series(12, map[int]Second{4: {Sent: 100, OK: 50, Violations: 50}})}, nil, ""},
	}
	for _, tc := range tests {
		_, failures := judgeNodeLoss(tc.row, tc.clients, 0.25, 5, 5)
		got := strings.Join(failures, "; ")
		if tc.fail == "" && got != "" || tc.fail != "" && !strings.Contains(got, tc.fail) {
			t.Errorf("%s: failures %q, want %q", tc.name, got, tc.fail)
		}
	}
}

func TestCounted(t *testing.T) {
	got := strings.Join(counted([]string{"fe1", "sleipnir-worker", "sleipnir-worker", "sleipnir-worker", "x"}), ", ")
	if want := "fe1, sleipnir-worker x3, x"; got != want {
		t.Errorf("counted: %q, want %q", got, want)
	}
}
