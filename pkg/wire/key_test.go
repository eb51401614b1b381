package wire

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestParseVariantKey: the keys read from plans, headers and heartbeats (untrusted) parse only when well formed, and
// a parsed key spells back to its text.
func TestParseVariantKey(t *testing.T) {
	long := strings.Repeat("a", 65)
	for _, tc := range []struct {
		in   string
		want VariantKey
		ok   bool
	}{
		{"detect/yolov5x", VariantKey{Task: "detect", Variant: "yolov5x"}, true},
		{"find_text/db-r50_1", VariantKey{Task: "find_text", Variant: "db-r50_1"}, true},
		{"", VariantKey{}, false},
		{"/", VariantKey{}, false},
		{"detect", VariantKey{}, false},
		{"detect/", VariantKey{}, false},
		{"/yolov5x", VariantKey{}, false},
		{"detect/yolo/v5", VariantKey{}, false},        // a third part
		{"p:detect/yolov5x", VariantKey{}, false},      // a served key is not a variant key
		{"detect/yolo.v5", VariantKey{}, false},        // a subject token separator
		{"detect/yolo*", VariantKey{}, false},          // a subject wildcard
		{"detect/yolo>", VariantKey{}, false},          // a subject wildcard
		{"detect /yolov5x", VariantKey{}, false},       // spaces
		{"detect/yolov5x\n", VariantKey{}, false},      // a line break
		{"detect/yolo\x00", VariantKey{}, false},       // a NUL
		{"détect/yolov5x", VariantKey{}, false},        // not ASCII
		{"detect/\xff\xfe", VariantKey{}, false},       // not UTF-8
		{"detect/../../etc", VariantKey{}, false},      // a path
		{"detect/" + long, VariantKey{}, false},        // a name over 64 bytes
		{long + "/v", VariantKey{}, false},             // a name over 64 bytes
		{"detect/yolov5x,cls/b0", VariantKey{}, false}, // a whole path
	} {
		got, err := ParseVariantKey(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseVariantKey(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), "want task/variant") {
			t.Errorf("ParseVariantKey(%q): error %q does not say what is wanted", tc.in, err)
		}
		if err == nil && got.String() != tc.in {
			t.Errorf("ParseVariantKey(%q).String() = %q", tc.in, got.String())
		}
	}
}

// TestParseServedKey: heartbeats' "pipeline:task/variant" keys, well formed or not.
func TestParseServedKey(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ServedKey
		ok   bool
	}{
		{"traffic:detect/yolov5x", ServedKey{Pipeline: "traffic", Task: "detect", Variant: "yolov5x"}, true},
		{"", ServedKey{}, false},
		{":/", ServedKey{}, false}, // an idle assignment's
		{"traffic:", ServedKey{}, false},
		{"traffic:detect", ServedKey{}, false},
		{"traffic:detect/", ServedKey{}, false},
		{":detect/yolov5x", ServedKey{}, false},
		{"detect/yolov5x", ServedKey{}, false},
		{"a:b:detect/yolov5x", ServedKey{}, false},
		{"traffic:detect/yolov5x/x", ServedKey{}, false},
		{"traffic.x:detect/yolov5x", ServedKey{}, false},
		{"traffic:detect/yolov5x\r\n", ServedKey{}, false},
		{strings.Repeat("p", 100) + ":detect/yolov5x", ServedKey{}, false},
	} {
		got, err := ParseServedKey(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseServedKey(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), "want pipeline:task/variant") {
			t.Errorf("ParseServedKey(%q): error %q does not say what is wanted", tc.in, err)
		}
		if err == nil && (got.String() != tc.in || got.Key().In(got.Pipeline) != got) {
			t.Errorf("ParseServedKey(%q) = %+v does not spell back", tc.in, got)
		}
	}
}

// TestParseTaskSubject: a consumer's filter subject read back from the server names its variant.
func TestParseTaskSubject(t *testing.T) {
	want := ServedKey{Pipeline: "traffic", Task: "detect", Variant: "yolov5x"}
	if got, err := ParseTaskSubject(TaskSubject("traffic", "detect", "yolov5x")); err != nil || got != want {
		t.Fatalf("ParseTaskSubject(TaskSubject(...)) = %+v, %v; want %+v", got, err, want)
	}
	for _, s := range []string{"", TaskPrefix, TaskPrefix + "traffic.detect", TaskPrefix + "traffic.detect.",
		TaskPrefix + "traffic.detect.yolo.x", TaskSubjects("traffic"), TaskPrefix + "traffic.*.yolov5x",
		DeadLetterSubject("traffic", "detect", "yolov5x"), "traffic.detect.yolov5x"} {
		if got, err := ParseTaskSubject(s); err == nil {
			t.Errorf("ParseTaskSubject(%q) = %+v, want an error", s, got)
		}
	}
}

// maxKeyError bounds a key error: the 80 runes quoted, at most 10 bytes each escaped (\U0010ffff), and the words.
const maxKeyError = 80*10 + 100

// TestKeyErrorsBounded: an error quotes at most the start of a hostile key, so a megabyte key is not logged whole.
func TestKeyErrorsBounded(t *testing.T) {
	huge := strings.Repeat("x/", 1<<19)
	for _, err := range []error{
		func() error { _, err := ParseVariantKey(huge); return err }(),
		func() error { _, err := ParseServedKey(huge); return err }(),
		func() error { _, err := ParseTaskSubject(TaskPrefix + huge); return err }(),
	} {
		if err == nil || len(err.Error()) > maxKeyError {
			t.Errorf("error of %d bytes for a hostile key: %.300v", len(err.Error()), err)
		}
	}
}

// TestKeysAsText: keys logged or encoded read as their text, so that typing them changed no log line or JSON.
func TestKeysAsText(t *testing.T) {
	k := VariantKey{Task: "detect", Variant: "yolov5x"}
	s := k.In("traffic")
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("m", "variant", k, "served", s)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("m", "variant", k, "served", s)
	for _, want := range []string{`"variant":"detect/yolov5x"`, `"served":"traffic:detect/yolov5x"`,
		` variant=detect/yolov5x served=traffic:detect/yolov5x`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log %q lacks %q", buf.String(), want)
		}
	}
	out, err := json.Marshal(map[string]any{"k": k, "s": s})
	if err != nil || string(out) != `{"k":"detect/yolov5x","s":"traffic:detect/yolov5x"}` {
		t.Errorf("json: %s, %v", out, err)
	}
}

// FuzzParseKeys: whatever a parser accepts spells back to the same text, and what it refuses gives an error of
// bounded size.
func FuzzParseKeys(f *testing.F) {
	for _, s := range []string{"detect/yolov5x", "traffic:detect/yolov5x", TaskSubject("traffic", "detect", "yolov5x"),
		"a:b:c/d", "x//y", ":/", "détect/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		check := func(what, back string, err error) {
			if err == nil && back != s {
				t.Fatalf("%s(%q) spells back as %q", what, s, back)
			}
			if err != nil && len(err.Error()) > maxKeyError {
				t.Fatalf("%s(%q): error of %d bytes", what, s, len(err.Error()))
			}
		}
		k, err := ParseVariantKey(s)
		check("ParseVariantKey", k.String(), err)
		sk, err := ParseServedKey(s)
		check("ParseServedKey", sk.String(), err)
		tk, err := ParseTaskSubject(s)
		check("ParseTaskSubject", TaskSubject(tk.Pipeline, tk.Task, tk.Variant), err)
	})
}
