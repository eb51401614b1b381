package wire

import (
	"strings"
	"testing"
	"time"
)

// What the frontend and the workers write, the workers read back: the deadline and message id from the headers, the
// address from the payload; the root message carries no path.
func TestTaskRoundTrip(t *testing.T) {
	deadline := time.Unix(0, 1_700_000_000_123_456_789)
	items := []Item{{ID: RootItemID, Den: 1, Inputs: []Tensor{NewFP32("x", []int64{1}, []float32{1})}}}
	for _, tc := range []struct {
		h TaskHeaders
		a TaskAddress
	}{
		{TaskHeaders{Deadline: deadline, MsgID: TaskMsgID("fe1-b-1", "", "t", "v")},
			TaskAddress{RequestID: "fe1-b-1", ReplyTo: ResultSubject("fe1")}},
		{TaskHeaders{Deadline: deadline, MsgID: TaskPartMsgID("fe1-b-1", RootItemID, "c", "w", []int{0, 1})},
			TaskAddress{RequestID: "fe1-b-1", ReplyTo: ResultSubject("fe1"),
				Path: AppendPath("", VariantKey{Task: "t", Variant: "v"})}},
	} {
		h := map[string]string{}
		tc.h.Write(func(k, v string) { h[k] = v })
		if len(h) != 2 {
			t.Errorf("%+v: headers %v, want the deadline and the message id alone", tc.h, h)
		}
		data := AppendTaskMessage(nil, (&TaskMessage{Items: items}).Addressed(tc.a))
		gotH, tm, err := ReadTask(func(k string) string { return h[k] }, data)
		if err != nil {
			t.Fatal(err)
		}
		if !gotH.Deadline.Equal(tc.h.Deadline) || gotH.MsgID != tc.h.MsgID {
			t.Errorf("read headers %+v, want %+v", gotH, tc.h)
		}
		if tm.Address() != tc.a || tm.Version != TaskVersion || len(tm.Items) != 1 || tm.Items[0].ID != RootItemID {
			t.Errorf("read %+v, want the address %+v and the items", tm, tc.a)
		}
		if a, err := ReadTaskAddress(func(string) string { return "" }, data); err != nil || a != tc.a {
			t.Errorf("ReadTaskAddress: %+v, %v; want %+v", a, err, tc.a)
		}
		// Header writes the same, one value a key; a value added to one key leaves the others as they were
		// (their values share an array).
		m := tc.h.Header(1)
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

// A version 1 message, addressed by its headers (what this code wrote before version 2, and what a message queued
// then still is), is read as before.
func TestTaskVersion1(t *testing.T) {
	h := map[string]string{HeaderRequestID: "fe1-b-1", HeaderReplyTo: ResultSubject("fe1"), HeaderPath: "t/v",
		HeaderDeadline: FormatDeadline(time.Now()), HeaderMsgID: "id"}
	data := AppendTaskMessage(nil, &TaskMessage{Items: []Item{{ID: "0.1", Den: 2}}})
	want := TaskAddress{RequestID: "fe1-b-1", ReplyTo: ResultSubject("fe1"), Path: "t/v"}
	_, tm, err := ReadTask(func(k string) string { return h[k] }, data)
	if err != nil || tm.Address() != want {
		t.Fatalf("ReadTask: %+v, %v; want the address %+v", tm, err, want)
	}
	if a, err := ReadTaskAddress(func(k string) string { return h[k] }, data); err != nil || a != want {
		t.Errorf("ReadTaskAddress: %+v, %v; want %+v", a, err, want)
	}
	// A version 2 payload's address is its own, whatever version 1 headers say.
	v2 := AppendTaskMessage(nil, (&TaskMessage{Items: []Item{{ID: "0", Den: 1}}}).Addressed(
		TaskAddress{RequestID: "fe2-b-9", ReplyTo: ResultSubject("fe2")}))
	if _, tm, err := ReadTask(func(k string) string { return h[k] }, v2); err != nil || tm.RequestID != "fe2-b-9" ||
		tm.Path != "" {
		t.Errorf("version 2 beside version 1 headers: %+v, %v", tm, err)
	}
}

func TestReadTaskRefuses(t *testing.T) {
	good := TaskAddress{RequestID: "r", ReplyTo: ResultSubject("fe1")}
	goodHeaders := map[string]string{HeaderDeadline: FormatDeadline(time.Now())}
	items := []Item{{ID: RootItemID, Den: 1}}
	for _, tc := range []struct {
		name    string
		header  string // a header set to value
		value   string
		payload func(*TaskMessage) // a change of the payload
		want    string
	}{
		{name: "no request id", payload: func(m *TaskMessage) { m.RequestID = "" }, want: "no request_id"},
		{name: "reply-to", payload: func(m *TaskMessage) { m.ReplyTo = InferSubject("p") }, want: "not a result subject"},
		{name: "version", payload: func(m *TaskMessage) { m.Version = 3 }, want: "version 3"},
		{name: "deadline", header: HeaderDeadline, value: "soon", want: "Unix nanoseconds"},
		{name: "no deadline", header: HeaderDeadline, value: "", want: "Unix nanoseconds"},
		{name: "version 1 without a request id", payload: func(m *TaskMessage) { m.Version = 0 },
			want: "no " + HeaderRequestID},
		{name: "version 1 reply-to", header: HeaderReplyTo, value: InferSubject("p"),
			payload: func(m *TaskMessage) { m.Version, m.RequestID = 1, "" }, want: "no " + HeaderRequestID},
	} {
		h := map[string]string{}
		for k, v := range goodHeaders {
			h[k] = v
		}
		if tc.header != "" {
			h[tc.header] = tc.value
		}
		m := (&TaskMessage{Items: items}).Addressed(good)
		if tc.payload != nil {
			tc.payload(m)
		}
		data := AppendTaskMessage(nil, m)
		if _, _, err := ReadTask(func(k string) string { return h[k] }, data); err == nil ||
			!strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// A payload that does not decode whole still gives the address written ahead of its items, so that its request is
// answered; a payload cut inside its address gives the headers' (none, here) and an error, and reads no further.
func TestReadTaskAddressOfABrokenPayload(t *testing.T) {
	a := TaskAddress{RequestID: "fe1-b-1", ReplyTo: ResultSubject("fe1"), Path: "t/v"}
	data := AppendTaskMessage(nil, (&TaskMessage{Items: []Item{{ID: "0.1", Den: 2,
		Inputs: []Tensor{NewFP32("x", []int64{2}, []float32{1, 2})}}}}).Addressed(a))
	none := func(string) string { return "" }
	broken := append([]byte(nil), data[:len(data)-5]...) // the items' tensor cut short
	if _, _, err := ReadTask(none, broken); err == nil {
		t.Fatal("a payload cut short was read")
	}
	if got, err := ReadTaskAddress(none, broken); err != nil || got != a {
		t.Errorf("ReadTaskAddress of a payload cut in its items: %+v, %v; want %+v", got, err, a)
	}
	// An array claiming 2^32 elements ahead of the address: read no further, nothing allocated for it.
	huge := append([]byte{0x85, 0xa5, 'i', 't', 'e', 'm', 's', 0xdd, 0xff, 0xff, 0xff, 0xff}, data[1:]...)
	if _, err := ReadTaskAddress(none, huge); err == nil {
		t.Error("an address behind an unreadable array was read")
	}
	for n := range len(data) {
		if got, err := ReadTaskAddress(none, data[:n]); err == nil && got != a {
			t.Errorf("cut at %d: %+v, want %+v or an error", n, got, a)
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
