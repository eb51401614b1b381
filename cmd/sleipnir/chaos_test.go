package main

import (
	"strings"
	"testing"
)

// TestChaosTopologyFlags: `sleipnir chaos` takes the cluster's flags that `make node-loss` passes (--nodes, --netns);
// an unknown fault is then what it refuses, before starting anything.
func TestChaosTopologyFlags(t *testing.T) {
	err := runChaos([]string{"--nodes", "3", "--netns", "--faults", "no-such-fault"})
	if err == nil || !strings.Contains(err.Error(), `unknown fault "no-such-fault"`) {
		t.Errorf("chaos --nodes 3 --netns --faults no-such-fault: %v, want the unknown fault refused", err)
	}
}
