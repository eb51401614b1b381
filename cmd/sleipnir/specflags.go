package main

import (
	"fmt"
	"time"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// overrideSpecs gives every spec the SLO slo and the accuracy floor minAccuracy (sim's --slo and --min-accuracy;
// zero leaves each spec's own).
func overrideSpecs(specs []*pipeline.Spec, slo time.Duration, minAccuracy float64) error {
	if slo < 0 {
		return fmt.Errorf("--slo %v: want a duration > 0", slo)
	}
	if !(minAccuracy >= 0 && minAccuracy <= 1) {
		return fmt.Errorf("--min-accuracy %v: want a system accuracy in (0, 1]", minAccuracy)
	}
	for _, s := range specs {
		if slo > 0 {
			s.SLOMs = float64(slo) / float64(time.Millisecond)
		}
		if minAccuracy > 0 {
			s.MinAccuracy = minAccuracy
		}
	}
	return nil
}

// minAccuracyOf is the accuracy floor of plan's --min-accuracy (flag), else the spec's.
func minAccuracyOf(spec *pipeline.Spec, flag float64) (float64, error) {
	if !(flag >= 0 && flag <= 1) {
		return 0, fmt.Errorf("--min-accuracy %v: want a system accuracy in (0, 1]", flag)
	}
	if flag > 0 {
		return flag, nil
	}
	return spec.MinAccuracy, nil
}
