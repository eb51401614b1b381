package wire

import (
	"strings"
	"testing"
	"time"
)

// What the frontend and the workers write, the workers read back; the root message carries no path.
func TestTaskHeadersRoundTrip(t *testing.T) {
	deadline := time.Unix(0, 1_700_000_000_123_456_789)
	for _, want := range []TaskHeaders{
		{RequestID: "fe1-b-1", Deadline: deadline, ReplyTo: ResultSubject("fe1"), MsgID: TaskMsgID("fe1-b-1", "", "t", "v")},
		{RequestID: "fe1-b-1", Deadline: deadline, Path: AppendPath("", VariantKey{Task: "t", Variant: "v"}),
			ReplyTo: ResultSubject("fe1"),
			MsgID:   TaskPartMsgID("fe1-b-1", RootItemID, "c", "w", []int{0, 1})},
	} {
		h := map[string]string{}
		want.Write(func(k, v string) { h[k] = v })
		if _, has := h[HeaderPath]; has != (want.Path != "") {
			t.Errorf("%+v: path header present %v", want, has)
		}
		got, err := ReadTaskHeaders(func(k string) string { return h[k] })
		if err != nil {
			t.Fatal(err)
		}
		if !got.Deadline.Equal(want.Deadline) {
			t.Errorf("deadline %v, want %v", got.Deadline, want.Deadline)
		}
		got.Deadline = want.Deadline
		if got != want {
			t.Errorf("read %+v, want %+v", got, want)
		}
		// Header writes the same, one value a key; a value added to one key leaves the others as they were
		// (their values share an array).
		m := want.Header(1)
		if len(m) != len(h) {
			t.Errorf("Header: %d keys, Write %d", len(m), len(h))
		}
		for k, v := range h {
			if len(m[k]) != 1 || m[k][0] != v {
				t.Errorf("Header %s: %q, want [%q]", k, m[k], v)
			}
		}
		for k := range h {
			m[k] = append(m[k], "more")
		}
		for k, v := range h {
			if m[k][0] != v {
				t.Errorf("Header %s: %q after appending to each, want %q first", k, m[k], v)
			}
		}
	}
}

func TestReadTaskHeadersRefuses(t *testing.T) {
	good := map[string]string{HeaderRequestID: "r", HeaderDeadline: FormatDeadline(time.Now()),
		HeaderReplyTo: ResultSubject("fe1")}
	for _, tc := range []struct{ header, value, want string }{
		{HeaderRequestID, "", "no " + HeaderRequestID},
		{HeaderReplyTo, InferSubject("p"), "not a result subject"},
		{HeaderDeadline, "soon", "Unix nanoseconds"},
		{HeaderDeadline, "", "Unix nanoseconds"},
	} {
		h := map[string]string{}
		for k, v := range good {
			h[k] = v
		}
		h[tc.header] = tc.value
		if _, err := ReadTaskHeaders(func(k string) string { return h[k] }); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want an error saying %q", tc.header, tc.value, err, tc.want)
		}
	}
}

func TestParsePriority(t *testing.T) {
	for s, want := range map[string]int{"0": 0, " 7 ": 7, "9": 9} {
		if got, err := ParsePriority(s, 9); err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "10", "-1", "high", "2.5"} {
		if _, err := ParsePriority(s, 9); err == nil || !strings.Contains(err.Error(), HeaderPriority) {
			t.Errorf("ParsePriority(%q): %v, want an error naming %s", s, err, HeaderPriority)
		}
	}
}
