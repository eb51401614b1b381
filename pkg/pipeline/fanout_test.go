package pipeline

import "testing"

// TestFanoutTo: the factor in force is the measured one when there is one, else the profile's; shares may be left
// out for a task of one child only.
func TestFanoutTo(t *testing.T) {
	one := &Task{Name: "a", Children: []string{"b"}}
	two := &Task{Name: "a", Children: []string{"b", "c"}}
	v := &Variant{Name: "x", Fanout: &Fanout{Mean: 2}}
	for _, tc := range []struct {
		what     string
		task     *Task
		child    string
		measured map[string]Fanout
		want     float64
	}{
		{"profile, one child, no shares", one, "b", nil, 2},
		{"measured, one child, no shares", one, "b", map[string]Fanout{"a/x": {Mean: 5}}, 5},
		{"measured with shares", two, "c", map[string]Fanout{"a/x": {Mean: 5, Shares: map[string]float64{"b": 0.6, "c": 0.4}}}, 2},
		{"another variant measured", one, "b", map[string]Fanout{"a/y": {Mean: 5}}, 2},
		{"two children, no shares: none", two, "b", nil, 0},
		{"not a child", one, "c", nil, 0},
	} {
		if got := tc.task.FanoutTo(v, tc.child, tc.measured); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.what, got, tc.want)
		}
	}
	if f := one.FanoutOf(&Variant{Name: "leaf"}, nil); f != nil {
		t.Errorf("a variant without a factor: %+v", f)
	}
}
