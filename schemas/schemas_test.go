package schemas_test

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
	"github.com/sleipnir-serving/sleipnir/schemas"
)

// TestReadmeNamesTheWire checks that the wire contract in README.md names what pkg/wire uses.
func TestReadmeNamesTheWire(t *testing.T) {
	doc, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	must := []string{
		wire.InferSubject("<pipeline>"), wire.QueueFrontend,
		wire.TaskSubject("<pipeline>", "<task>", "<variant>"), wire.TaskStream("<pipeline>"),
		wire.Consumer("<task>", "<variant>"), wire.ResultSubject("<frontend-id>"), wire.DemandSubject("<pipeline>"),
		"KV bucket `" + wire.Bucket + "`",
		wire.SpecKey("<pipeline>"), wire.PlanKey("<pipeline>"), wire.AssignKey("<worker>"), wire.WorkerKey("<worker>"),
		wire.HeaderRequestID, wire.HeaderDeadline, wire.HeaderTimeout, wire.HeaderPath, wire.HeaderReplyTo,
		wire.HeaderContentType, wire.HeaderError, wire.HeaderMsgID, wire.HeaderTraceParent, wire.HeaderRetryAfter,
		wire.HeaderServiceError, wire.HeaderServiceErrorCode, wire.PlannerStatusSubject(),
		wire.WorkerStatusSubject("<worker>"), wire.ServiceFrontend, wire.ServicePlanner, wire.ServiceWorker,
		wire.ServiceVersion,
		wire.ContentJSON, wire.ContentMsgpack,
		wire.StatusOK, wire.StatusPartial, wire.StatusDropped, wire.StatusLate, wire.StatusError, wire.StatusOverloaded,
		wire.HeaderPriority,
		wire.DropDeadline, wire.DropUnrouted,
		"`" + wire.TaskMsgID("<request-id>", "", "<task>", "<variant>") + "`",
		"`" + wire.TaskMsgID("<request-id>", "<parent-item>", "<task>", "<variant>") + "#<subs>`",
	}
	for _, s := range must {
		if !strings.Contains(text, s) {
			t.Errorf("schemas/README.md does not mention %q", s)
		}
	}
	// The payload types' msgpack field names, as the README lists them.
	for _, typ := range []any{wire.Tensor{}, wire.InferRequest{}, wire.InferReply{}, wire.TaskMessage{}, wire.Item{},
		wire.ResultMessage{}, wire.ItemResult{}, wire.DemandReport{}} {
		rt := reflect.TypeOf(typ)
		line := lineStarting(text, rt.Name()+" ")
		if line == "" {
			t.Errorf("README has no payload line for %s", rt.Name())
			continue
		}
		for i := 0; i < rt.NumField(); i++ {
			name := strings.Split(rt.Field(i).Tag.Get("msgpack"), ",")[0]
			if !strings.Contains(line, name+":") && !strings.Contains(line, name+"?:") {
				t.Errorf("README's %s lacks field %q", rt.Name(), name)
			}
		}
	}
}

// lineStarting returns the payload block's line (and its continuation) for a type.
func lineStarting(text, prefix string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			out := l
			for j := i + 1; j < len(lines) && strings.HasPrefix(lines[j], "   "); j++ {
				out += lines[j]
			}
			return out
		}
	}
	return ""
}

// TestSchemaMatchesSpecTypes checks that pipeline.schema.json and pkg/pipeline's JSON tags name the same fields.
func TestSchemaMatchesSpecTypes(t *testing.T) {
	var sch struct {
		Properties map[string]any `json:"properties"`
		Defs       map[string]struct {
			Properties map[string]any `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(schemas.PipelineSchema, &sch); err != nil {
		t.Fatal(err)
	}
	variant := sch.Defs["variant"].Properties
	sub := func(m map[string]any, key string) map[string]any {
		return m[key].(map[string]any)["properties"].(map[string]any)
	}
	cases := []struct {
		typ   any
		props map[string]any
	}{
		{pipeline.Spec{}, sch.Properties},
		{pipeline.Task{}, sch.Defs["task"].Properties},
		{pipeline.Variant{}, variant},
		{pipeline.Executor{}, sub(variant, "executor")},
		{pipeline.Fanout{}, sch.Defs["fanout"].Properties},
		{pipeline.Join{}, sub(sch.Defs["task"].Properties, "join")},
		{pipeline.ProfilePoint{}, sch.Defs["profilePoint"].Properties},
		{pipeline.PathAccuracy{}, sch.Defs["pathAccuracy"].Properties},
		{pipeline.Allocation{}, sch.Defs["allocation"].Properties},
	}
	for _, c := range cases {
		rt := reflect.TypeOf(c.typ)
		var tags, props []string
		for i := 0; i < rt.NumField(); i++ {
			tags = append(tags, strings.Split(rt.Field(i).Tag.Get("json"), ",")[0])
		}
		for p := range c.props {
			props = append(props, p)
		}
		sort.Strings(tags)
		sort.Strings(props)
		if !reflect.DeepEqual(tags, props) {
			t.Errorf("%s: Go fields %v, schema properties %v", rt.Name(), tags, props)
		}
	}
}
