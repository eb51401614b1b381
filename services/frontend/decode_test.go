package frontend

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

var decodeSpec = &pipeline.Spec{Name: "p", SLOMs: 500}

const decodeMaxBytes, decodeMaxAhead = 1 << 20, time.Minute

func decodeWith(data []byte, asJSON bool, hdr map[string]string, arrival time.Time) (wire.OIPRequest, time.Time, error) {
	return decodeRequest(data, asJSON, func(k string) string { return hdr[k] }, arrival, decodeSpec,
		decodeMaxBytes, decodeMaxAhead, "request is not valid JSON")
}

// TestDeadlines checks how the headers set a request's deadline, from its arrival, and which are refused.
func TestDeadlines(t *testing.T) {
	arrival := time.Unix(1_700_000_000, 0)
	good := []byte(`{"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}`)
	ns := func(d time.Duration) string { return wire.FormatDeadline(arrival.Add(d)) }
	tests := []struct {
		name string
		hdr  map[string]string
		want time.Duration // from arrival; 0: refused
		err  string
	}{
		{"no header: the SLO", nil, 500 * time.Millisecond, ""},
		{"timeout", map[string]string{wire.HeaderTimeout: " 250ms "}, 250 * time.Millisecond, ""},
		{"timeout at the limit", map[string]string{wire.HeaderTimeout: "1m"}, time.Minute, ""},
		{"timeout past the limit", map[string]string{wire.HeaderTimeout: "1m0.001s"}, 0, "further ahead than the limit of 1m0s"},
		{"timeout past 2262", map[string]string{wire.HeaderTimeout: "2500000h"}, 0, "further ahead than"},
		{"timeout past int64", map[string]string{wire.HeaderTimeout: "3000000h"}, 0, "want a duration"},
		{"negative timeout", map[string]string{wire.HeaderTimeout: "-1s"}, 0, "already passed"},
		{"deadline", map[string]string{wire.HeaderDeadline: ns(2 * time.Second)}, 2 * time.Second, ""},
		{"deadline wins over timeout", map[string]string{wire.HeaderDeadline: ns(time.Second), wire.HeaderTimeout: "1h"}, time.Second, ""},
		{"deadline past the limit", map[string]string{wire.HeaderDeadline: ns(time.Hour)}, 0, "further ahead than"},
		{"deadline at the end of int64", map[string]string{wire.HeaderDeadline: "9223372036854775807"}, 0, "further ahead than"},
		{"deadline at arrival", map[string]string{wire.HeaderDeadline: ns(0)}, 0, "already passed"},
		{"deadline zero", map[string]string{wire.HeaderDeadline: "0"}, 0, "want decimal Unix nanoseconds"},
		{"deadline not a number", map[string]string{wire.HeaderDeadline: "1e18"}, 0, "want decimal Unix nanoseconds"},
	}
	for _, tc := range tests {
		_, d, err := decodeWith(good, true, tc.hdr, arrival)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.err == "" && d.Sub(arrival) != tc.want:
			t.Errorf("%s: deadline %v after arrival, want %v", tc.name, d.Sub(arrival), tc.want)
		case tc.err != "" && (err == nil || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want a bad request saying %q", tc.name, err, tc.err)
		}
	}
}

// TestMaxAhead: by default a deadline may be a minute ahead, or 10 SLOs for a slow pipeline; the config overrides.
func TestMaxAhead(t *testing.T) {
	f := &Frontend{}
	if got := f.maxAhead(&pipeline.Spec{SLOMs: 500}); got != time.Minute {
		t.Errorf("SLO 500 ms: %v, want 1m", got)
	}
	if got := f.maxAhead(&pipeline.Spec{SLOMs: 30000}); got != 5*time.Minute {
		t.Errorf("SLO 30 s: %v, want 5m", got)
	}
	f.cfg.MaxTimeout = 3 * time.Second
	if got := f.maxAhead(&pipeline.Spec{SLOMs: 30000}); got != 3*time.Second {
		t.Errorf("configured 3s: %v", got)
	}
	if _, err := New(nil, Config{ID: "x", MaxTimeout: 100 * 24 * time.Hour}); err == nil {
		t.Error("a max timeout of 100 days was taken")
	}
}

// FuzzDecodeRequest drives the decoding of a client request (payload and deadline headers, either encoding): it must
// never panic, a refusal is a bad request with a message, and an accepted request has valid inputs and a deadline the
// task message's header can carry. Run: go test ./services/frontend -run '^$' -fuzz FuzzDecodeRequest -fuzztime 30s
func FuzzDecodeRequest(f *testing.F) {
	good, err := msgpack.Marshal(&wire.InferRequest{ID: "r1", Inputs: []wire.Tensor{wire.NewFP32("x", []int64{1, 2}, []float32{1, 2})}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, false, "", "")
	f.Add(good, false, "", "2500000h")
	f.Add(good, false, "9223372036854775807", "")
	f.Add([]byte(`{"id": "j", "inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 1.5]}]}`), true, "", "250ms")
	f.Add([]byte(`{"inputs": [{"name": "s", "datatype": "BYTES", "shape": [2], "data": ["a", "bc"]}]}`), true, "1700000000500000000", "")
	f.Add([]byte(`{"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4], "data": []}]}`), true, "", "")
	f.Add([]byte(`{"inputs": [`), true, "", "")
	f.Add([]byte{0xc1, 0xff, 0x00}, false, "soon", "-5ms")
	arrival := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool, deadline, timeout string) {
		hdr := map[string]string{wire.HeaderDeadline: deadline, wire.HeaderTimeout: timeout}
		req, d, err := decodeWith(data, asJSON, hdr, arrival)
		if err != nil {
			var r *refusal
			if !errors.As(err, &r) || !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrTooLarge) || r.msg == "" {
				t.Fatalf("refused with %T %q, want a bad request (or one too large) with a message", err, err)
			}
			return
		}
		if len(req.Inputs) == 0 {
			t.Fatal("accepted a request without inputs")
		}
		for i := range req.Inputs {
			if err := req.Inputs[i].Validate(); err != nil {
				t.Fatalf("accepted invalid inputs[%d]: %v", i, err)
			}
		}
		if !d.After(arrival) || d.Sub(arrival) > decodeMaxAhead {
			t.Fatalf("accepted a deadline %v after arrival", d.Sub(arrival))
		}
		if back, err := wire.ParseDeadline(wire.FormatDeadline(d)); err != nil || !back.Equal(d) {
			t.Fatalf("deadline %v does not survive its header: %v %v", d, back, err)
		}
		if _, err := msgpack.Marshal(&wire.TaskMessage{Items: []wire.Item{{ID: wire.RootItemID, Den: 1, Inputs: req.Inputs}}}); err != nil {
			t.Fatalf("accepted a request its task message cannot carry: %v", err)
		}
	})
}

// TestDecodeChecksDeclaredInputs: a request is checked against the inputs its pipeline declares, with the check a
// worker makes of a root task message (pipeline.Spec.CheckInputs): the refusal is a bad request saying why.
func TestDecodeChecksDeclaredInputs(t *testing.T) {
	spec := &pipeline.Spec{Name: "p", SLOMs: 500, Inputs: []pipeline.TensorSpec{{Name: "image", Datatype: "FP32", Shape: []int64{-1, 2}}}}
	arrival := time.Unix(1_700_000_000, 0)
	decode := func(body string) error {
		_, _, err := decodeRequest([]byte(body), true, func(string) string { return "" }, arrival, spec,
			decodeMaxBytes, decodeMaxAhead, "request is not valid JSON")
		return err
	}
	if err := decode(`{"inputs": [{"name": "image", "datatype": "FP32", "shape": [3, 2], "data": [1, 2, 3, 4, 5, 6]}]}`); err != nil {
		t.Errorf("a declared input refused: %v", err)
	}
	for body, want := range map[string]string{
		`{"inputs": [{"name": "image", "datatype": "FP32", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]}]}`: `tensor "image" is FP32[2 3]; pipeline p takes image FP32[-1 2]`,
		`{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}`:                 `tensor "x" is not an input of pipeline p`,
	} {
		err := decode(body)
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a bad request saying %q", body, err, want)
		}
	}
}
