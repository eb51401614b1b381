package wire

import (
	"strings"
	"testing"
)

// TestTaskPartMsgID: a part's id names the sub-requests it carries, as runs, and hashes a long list; different sets
// get different ids.
func TestTaskPartMsgID(t *testing.T) {
	base := TaskMsgID("r1", "0", "car", "c1")
	long := make([]int, 40)
	for i := range long {
		long[i] = 2 * i
	}
	for _, tc := range []struct {
		subs []int
		want string
	}{
		{[]int{0, 1, 2, 3, 4, 5}, base + "#0-5"},
		{[]int{6, 7, 8, 9, 10, 11}, base + "#6-11"},
		{[]int{3}, base + "#3"},
		{[]int{0, 2, 4, 5, 6, 9}, base + "#0.2.4-6.9"},
	} {
		if got := TaskPartMsgID("r1", "0", "car", "c1", tc.subs); got != tc.want {
			t.Errorf("TaskPartMsgID(%v) = %q, want %q", tc.subs, got, tc.want)
		}
	}
	a := TaskPartMsgID("r1", "0", "car", "c1", long)
	if !strings.HasPrefix(a, base+"#h") || len(a) > len(base)+2+16 {
		t.Errorf("a long list's id %q: want %q, 'h' and a 64-bit hash in hex", a, base+"#")
	}
	long[39]++
	if b := TaskPartMsgID("r1", "0", "car", "c1", long); b == a {
		t.Errorf("two lists got the same id %q", a)
	}
}
