package plan

import "testing"

// TestExcess: a hosted variant keeps what its replicas, the plan's and lent, take in ExcessBatches batches; the rest
// of its queue is the excess; a variant not hosted has none (Rehome moves all of its queue).
func TestExcess(t *testing.T) {
	p := &Plan{Variants: []VariantPlan{{Task: "b", Variant: "y", Replicas: 1, MaxBatch: 4},
		{Task: "b", Variant: "z", Replicas: 0, MaxBatch: 4}}}
	for _, tc := range []struct {
		variant       string
		pending, lent int
		want          int
	}{
		{"y", 20, 0, 20 - ExcessBatches*4},
		{"y", 20, 1, 20 - ExcessBatches*8},
		{"y", ExcessBatches * 4, 0, 0},
		{"z", 20, 0, 0},
		{"gone", 20, 0, 0},
	} {
		if got := p.Excess("b", tc.variant, tc.pending, tc.lent); got != tc.want {
			t.Errorf("Excess(b/%s, %d pending, %d lent) = %d, want %d", tc.variant, tc.pending, tc.lent, got, tc.want)
		}
	}
}

// TestSibling: the excess goes where the routing sends the task's traffic from the message's upstream hop, in
// proportion, but never back to its own variant nor to one the plan does not host; nowhere when there is no other.
func TestSibling(t *testing.T) {
	p := &Plan{Variants: []VariantPlan{{Task: "b", Variant: "y", Replicas: 1}, {Task: "b", Variant: "z", Replicas: 2},
		{Task: "b", Variant: "w", Replicas: 1}, {Task: "b", Variant: "off"}},
		Routing: Routing{Downstream: map[string]map[string][]Route{
			"a/x":    {"b": {{Variant: "y", Prob: 0.5}, {Variant: "z", Prob: 0.25}, {Variant: "w", Prob: 0.25}}},
			"a/solo": {"b": {{Variant: "y", Prob: 0.9}, {Variant: "off", Prob: 0.1}}}}}}
	got := map[string]int{}
	for i := range 100 {
		got[p.Sibling("b", "y", "a/x", (float64(i)+0.5)/100)]++
	}
	if got["z"] != 50 || got["w"] != 50 || len(got) != 2 {
		t.Errorf("the excess of b/y from a/x went %v, want half to z and half to w", got)
	}
	if to := p.Sibling("b", "z", "a/x", 0.1); to != "y" {
		t.Errorf("the excess of b/z at u=0.1 went to %q, want y (two thirds of what is left of the routing)", to)
	}
	if to := p.Sibling("b", "y", "a/solo", 0.5); to != "" {
		t.Errorf("the excess of b/y from a/solo went to %q, want nowhere: the other route is not hosted", to)
	}
	alone := &Plan{Variants: []VariantPlan{{Task: "b", Variant: "y", Replicas: 3}, {Task: "b", Variant: "off"}}}
	if !p.HostsOther("b", "y") || alone.HostsOther("b", "y") {
		t.Error("HostsOther: want true beside z and w, false beside an unhosted variant only")
	}
}
