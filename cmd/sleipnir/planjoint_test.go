package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
)

// TestPlanJointJSON: plan with two --pipeline and a NAME=QPS demand each prints one JSON object per pipeline, named
// by its pipeline field, on the servers given in all; the demand flag refuses what it cannot read.
func TestPlanJointJSON(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	err = runPlan([]string{"--pipeline", "../../examples/traffic.yaml", "--pipeline", "../../examples/ocr-chain.yaml",
		"--demand", "traffic=300", "--demand", "ocr-chain=20", "--servers", "20", "--json"})
	os.Stdout = stdout
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	var got []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%v: %s", err, sc.Bytes())
		}
		got = append(got, m)
	}
	if len(got) != 2 || got[0]["pipeline"] != "traffic" || got[1]["pipeline"] != "ocr-chain" ||
		got[0]["servers_used"].(float64)+got[1]["servers_used"].(float64) > 20 || got[0]["mode"] != "hardware" {
		t.Fatalf("plan --json: %s", out)
	}

	specs := []*pipeline.Spec{{Name: "a"}, {Name: "b"}}
	for _, bad := range [][]string{{"x"}, {"-1"}, {"a=1", "a=2"}, {"1", "a=1"}, {"a=1", "2"}, {"=3"}} {
		var d demandFlag
		failed := false
		for _, v := range bad {
			failed = failed || d.Set(v) != nil
		}
		if !failed {
			if _, err := d.of(specs); err == nil {
				t.Errorf("--demand %q: no error", bad)
			}
		}
	}
	for _, bad := range [][]string{{"3"}, {"a=1"}, {"a=1", "b=2", "c=3"}} {
		var d demandFlag
		for _, v := range bad {
			if err := d.Set(v); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := d.of(specs); err == nil {
			t.Errorf("--demand %q for pipelines a and b: no error", bad)
		}
	}
}
