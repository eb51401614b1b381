package all_test

import (
	"slices"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/executor"
	_ "github.com/sleipnir-serving/sleipnir/pkg/executor/all"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// Importing all registers every kind a pipeline spec may name.
func TestAllRegistersEveryKind(t *testing.T) {
	want := []string{pipeline.ExecutorEmulated, pipeline.ExecutorONNX}
	if got := executor.Kinds(); !slices.Equal(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
}
