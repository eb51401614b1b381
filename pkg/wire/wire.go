// Package wire names everything that crosses the data plane: subjects, stream and consumer names, headers, KV keys
// and payloads. schemas/README.md documents the same names; keep the two in step. The package is pure (no NATS).
package wire

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// Subjects and streams.
const (
	// InferPrefix + pipeline is where clients send requests (NATS request-reply); frontends share QueueFrontend.
	InferPrefix   = "sleipnir.infer."
	QueueFrontend = "sleipnir-frontend"
	// TaskPrefix + pipeline.task.variant is a variant's work subject, stored in the pipeline's TaskStream.
	TaskPrefix = "sleipnir.task."
	// ResultPrefix + frontend id is where workers send finished and dropped items (core NATS).
	ResultPrefix = "sleipnir.result."
	// DemandPrefix + pipeline is where frontends report, every second, how many requests they accepted (core NATS).
	DemandPrefix = "sleipnir.demand."
	// Bucket is the JetStream KV bucket holding specs, plans, assignments and worker registrations.
	Bucket = "sleipnir"
	// DeadLetterPrefix + pipeline.task.variant is where workers set aside the task messages of a variant they will
	// not execute (DeadLetterSubject), stored in DeadLetterStream.
	DeadLetterPrefix = "sleipnir.deadletter."
	// DeadLetterStream is the JetStream stream (limits retention) of the messages set aside, for operators to read
	// (`nats stream view SLEIPNIR_DEADLETTER`).
	DeadLetterStream = "SLEIPNIR_DEADLETTER"
)

// DeadLetterSubject is where a task message of one variant is set aside.
func DeadLetterSubject(pipeline, task, variant string) string {
	return DeadLetterPrefix + pipeline + "." + task + "." + variant
}

// DeadLetterSubjects is the wildcard covering every dead-letter subject.
const DeadLetterSubjects = DeadLetterPrefix + ">"

// InferSubject is the request subject of a pipeline.
func InferSubject(pipeline string) string { return InferPrefix + pipeline }

// TaskSubject is the work subject of one model variant.
func TaskSubject(pipeline, task, variant string) string {
	return TaskPrefix + pipeline + "." + task + "." + variant
}

// TaskSubjects is the wildcard covering every variant subject of a pipeline.
func TaskSubjects(pipeline string) string { return TaskPrefix + pipeline + ".>" }

// TaskStream is the JetStream stream (work-queue retention) holding a pipeline's variant subjects.
func TaskStream(pipeline string) string { return "SLEIPNIR_" + pipeline }

// Consumer is the durable pull consumer shared by all replicas of a variant.
func Consumer(task, variant string) string { return task + "_" + variant }

// DemandSubject is where frontends report a pipeline's demand.
func DemandSubject(pipeline string) string { return DemandPrefix + pipeline }

// ResultSubject is where items of requests accepted by one frontend are reported.
func ResultSubject(frontendID string) string { return ResultPrefix + frontendID }

// InboxPrefix is where a service user's connections receive replies (request-reply, JetStream API answers and
// publish acknowledgements, KV watch deliveries, a pull consumer's deliveries): one prefix per NATS user (planner,
// frontend, worker-<id>), outside the clients' ClientInboxes, so that permissions can keep every user from reading
// another's replies.
func InboxPrefix(user string) string { return "_SLEIPNIR." + user }

// ClientInboxPrefix is where a client user's connections receive replies: "_INBOX.<user>", named after the NATS user
// (client, observer, client-<tenant>). A client may read its own prefix only; the frontends answer on any of them.
func ClientInboxPrefix(user string) string { return clientInboxRoot + "." + user }

// clientInboxRoot is nats.go's default inbox prefix, under which every client's own prefix lies.
const clientInboxRoot = "_INBOX"

// ClientInboxes matches every client's inbox (and no service's): where frontends may publish their replies.
const ClientInboxes = clientInboxRoot + ".>"

// KVSubject is the subject a put or delete of key in Bucket is published to: permissions to write a key are
// permissions to publish here.
func KVSubject(key string) string { return "$KV." + Bucket + "." + key }

// KVStream is the JetStream stream behind Bucket.
const KVStream = "KV_" + Bucket

// KeyKind is what a key in Bucket holds: the key is the kind, ".", and the pipeline (spec, plan) or worker (assign,
// worker) it is about.
type KeyKind string

// The kinds of keys in Bucket.
const (
	SpecKeys   KeyKind = "spec"   // a pipeline's spec
	PlanKeys   KeyKind = "plan"   // a pipeline's plan
	AssignKeys KeyKind = "assign" // a worker's assignment
	WorkerKeys KeyKind = "worker" // a worker's registration (heartbeat)
)

// Key is the key of kind k about name (a pipeline or a worker).
func (k KeyKind) Key(name string) string { return string(k) + "." + name }

// Pattern matches every key of kind k, for watches and listings.
func (k KeyKind) Pattern() string { return string(k) + ".*" }

// Name is the pipeline or worker key is about; ok is false when key is not of kind k.
func (k KeyKind) Name(key string) (name string, ok bool) {
	return strings.CutPrefix(key, string(k)+".")
}

// KV keys in Bucket.
func SpecKey(pipeline string) string { return SpecKeys.Key(pipeline) }
func PlanKey(pipeline string) string { return PlanKeys.Key(pipeline) }
func AssignKey(worker string) string { return AssignKeys.Key(worker) }
func WorkerKey(worker string) string { return WorkerKeys.Key(worker) }

// Headers. Clients set HeaderDeadline or HeaderTimeout (optional) and HeaderContentType; the frontend sets the others
// on every task message.
const (
	HeaderRequestID = "Sleipnir-Request-Id"
	HeaderDeadline  = "Sleipnir-Deadline" // absolute, decimal Unix nanoseconds
	HeaderTimeout   = "Sleipnir-Timeout"  // relative, Go duration ("250ms"); clients only
	// HeaderPriority is a request's priority class (decimal, 0-9), no higher than its pipeline's; clients only.
	HeaderPriority    = "Sleipnir-Priority"
	HeaderPath        = "Sleipnir-Path"     // hops so far: "task/variant,task/variant"
	HeaderReplyTo     = "Sleipnir-Reply-To" // result subject of the frontend that owns the request
	HeaderContentType = "Content-Type"
	HeaderError       = "Sleipnir-Error" // set on error replies, with the reply's error text
	HeaderMsgID       = "Nats-Msg-Id"    // JetStream de-duplication
	HeaderTraceParent = "traceparent"
	// HeaderTraceID is on every reply to an accepted request (NATS and HTTP): the request's trace id, to look it up
	// in a tracing backend.
	HeaderTraceID = "Sleipnir-Trace-Id"
	// HeaderRetryAfter is on the HTTP API's 429 and 503 responses: seconds to wait before retrying.
	HeaderRetryAfter = "Retry-After"
	// HeaderServiceError and HeaderServiceErrorCode are the NATS micro framework's error headers (micro.ErrorHeader,
	// micro.ErrorCodeHeader): error replies carry them too, the code as the HTTP API's status code.
	HeaderServiceError     = "Nats-Service-Error"
	HeaderServiceErrorCode = "Nats-Service-Error-Code"
	// A message set aside in DeadLetterStream keeps every header it had and gains these: why (SetAside*), the
	// subject it was taken from, how many times it had been delivered, and the worker that set it aside.
	HeaderSetAsideReason     = "Sleipnir-Set-Aside-Reason"
	HeaderSetAsideError      = "Sleipnir-Set-Aside-Error"
	HeaderSetAsideSubject    = "Sleipnir-Set-Aside-Subject"
	HeaderSetAsideDeliveries = "Sleipnir-Set-Aside-Deliveries"
	HeaderSetAsideWorker     = "Sleipnir-Set-Aside-Worker"
)

// HeaderSetAsideOriginal prefixes, on a message set aside, the original headers JetStream acts on when it stores a
// message ("Nats-" ones such as Nats-Expected-Stream, which held for the task stream and would refuse the copy):
// they are kept under SetAsideHeader's name. Nats-Msg-Id is kept as it was: it de-duplicates the copy.
const HeaderSetAsideOriginal = "Sleipnir-Set-Aside-Original-"

// SetAsideHeader is the name an original header key takes on the copy of a message set aside.
func SetAsideHeader(key string) string {
	if strings.HasPrefix(strings.ToLower(key), "nats-") && !strings.EqualFold(key, HeaderMsgID) {
		return HeaderSetAsideOriginal + key
	}
	return key
}

// Reasons a worker sets a task message aside (HeaderSetAsideReason; the metrics' reason label).
const (
	// SetAsideRedelivered: delivered as many times as the consumer's bound without being acknowledged (a worker
	// that took it died, or could not finish it, every time): it is not executed again.
	SetAsideRedelivered = "redelivered"
	// SetAsideUndecodable: its headers or payload are not a task message.
	SetAsideUndecodable = "undecodable"
)

// SetAsideReasons lists every reason a message is set aside.
var SetAsideReasons = []string{SetAsideRedelivered, SetAsideUndecodable}

// NATS micro services (github.com/nats-io/nats.go/micro): what `nats micro list` shows. Frontends list an infer
// endpoint per pipeline (InferSubject, queue group QueueFrontend); the planner and each worker a status endpoint.
const (
	ServiceFrontend = "sleipnir-frontend"
	ServicePlanner  = "sleipnir-planner"
	ServiceWorker   = "sleipnir-worker"
	// ServiceVersion is the version of the services' endpoints (SemVer, as micro requires).
	ServiceVersion = "1.0.0"
	// StatusPrefix + "planner", "worker.<id>" or "frontend.<id>" answers a request with the service's status (JSON).
	StatusPrefix = "sleipnir.status."
)

// PlannerStatusSubject is the planner's status endpoint.
func PlannerStatusSubject() string { return StatusPrefix + "planner" }

// WorkerStatusSubject is a worker's status endpoint.
func WorkerStatusSubject(worker string) string { return StatusPrefix + "worker." + worker }

// FrontendStatusSubject is a frontend's status endpoint.
func FrontendStatusSubject(frontend string) string { return StatusPrefix + "frontend." + frontend }

// Content types of client requests and replies.
const (
	ContentJSON    = "application/json"
	ContentMsgpack = "application/msgpack"
)

// Reply statuses.
const (
	StatusOK      = "ok"      // every item finished in time
	StatusPartial = "partial" // some items finished, others were dropped or failed
	StatusDropped = "dropped" // every item was dropped
	StatusLate    = "late"    // the deadline passed first; the reply holds what had finished
	StatusError   = "error"   // the request was refused or every item failed
	// StatusOverloaded: the request was refused at once, before it cost model time, for lack of room or time
	// (admission control, the frontend's bounds); retry later, or elsewhere.
	StatusOverloaded = "overloaded"
)

// Item statuses, in ItemResult.Status.
const (
	ItemOK      = "ok"
	ItemDropped = "dropped"
	ItemError   = "error"
)

// Degraded answers (deadline policy degrade): an item too late for the rest of its path is answered with what the
// tasks it ran had made (its Reason says why the rest was skipped, its Path the hops it ran), and a reply all of
// whose items were answered in time, some of them so, is degraded.
const (
	ItemDegraded   = "degraded"
	StatusDegraded = "degraded"
)

// Drop reasons.
const (
	DropDeadline = "deadline"          // the deadline had passed before the item was executed
	DropUnrouted = "unrouted"          // the plan hosts no variant of the item's task
	DropLastTask = "no-time-for-last"  // last-task policy: less time left than the last task takes
	DropBudget   = "over-budget"       // per-task policy: the item spent more than its task's latency budget
	DropNoFaster = "no-faster-variant" // reroute policy: late, and no downstream variant fast enough has room
)

// DropReasons lists every drop reason.
var DropReasons = []string{DropDeadline, DropUnrouted, DropLastTask, DropBudget, DropNoFaster}

// FormatDeadline encodes an absolute deadline for HeaderDeadline.
func FormatDeadline(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

// ParseDeadline decodes HeaderDeadline.
func ParseDeadline(s string) (time.Time, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}, fmt.Errorf("%s %q: want decimal Unix nanoseconds", HeaderDeadline, s)
	}
	return time.Unix(0, n), nil
}

// ParsePriority decodes HeaderPriority: a class from 0 to maxClass.
func ParsePriority(s string, maxClass int) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 || n > maxClass {
		return 0, fmt.Errorf("%s %q: want a class from 0 to %d", HeaderPriority, s, maxClass)
	}
	return n, nil
}

// ParseTimeout decodes HeaderTimeout: a Go duration such as "250ms".
func ParseTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a duration such as 250ms", HeaderTimeout, s)
	}
	return d, nil
}

// TaskHeaders are the headers of a task message: the frontend writes them on a request's root message, workers on
// the sub-requests they forward, and workers read them from every message they take.
type TaskHeaders struct {
	RequestID string
	Deadline  time.Time
	Path      string // the variants before this one (AppendPath); "" on the root message
	ReplyTo   string // the result subject of the frontend that owns the request
	MsgID     string // JetStream de-duplication id (TaskMsgID, TaskPartMsgID)
}

// Header gives the headers as a NATS message's header map (nats.Header's type), an empty Path left out, with room
// for extra more keys (a trace context): one map and one array of values, where Write with nats.Header.Set makes a
// slice a header (a worker writes them on every message it forwards).
func (h TaskHeaders) Header(extra int) map[string][]string {
	m := make(map[string][]string, 5+extra)
	values := make([]string, 0, 5)
	h.Write(func(key, value string) {
		values = append(values, value)
		m[key] = values[len(values)-1 : len(values) : len(values)]
	})
	return m
}

// Write sets the headers with set (such as nats.Header.Set); an empty Path is left out.
func (h TaskHeaders) Write(set func(key, value string)) {
	set(HeaderRequestID, h.RequestID)
	set(HeaderDeadline, FormatDeadline(h.Deadline))
	if h.Path != "" {
		set(HeaderPath, h.Path)
	}
	set(HeaderReplyTo, h.ReplyTo)
	set(HeaderMsgID, h.MsgID)
}

// ReadTaskHeaders reads a task message's headers with get (such as nats.Header.Get). A message without a request
// id, with a reply-to that is not a result subject, or without a valid deadline is refused.
func ReadTaskHeaders(get func(key string) string) (TaskHeaders, error) {
	id, replyTo, err := ReadReplyAddress(get)
	if err != nil {
		return TaskHeaders{}, err
	}
	h := TaskHeaders{RequestID: id, Path: get(HeaderPath), ReplyTo: replyTo, MsgID: get(HeaderMsgID)}
	d, err := ParseDeadline(get(HeaderDeadline))
	if err != nil {
		return TaskHeaders{}, err
	}
	h.Deadline = d
	return h, nil
}

// ReadReplyAddress reads where a task message's request is answered: its request id and its frontend's result
// subject. A worker that cannot read the rest of a message answers its request when these are readable.
func ReadReplyAddress(get func(key string) string) (requestID, replyTo string, err error) {
	requestID, replyTo = get(HeaderRequestID), get(HeaderReplyTo)
	if requestID == "" {
		return "", "", errors.New("no " + HeaderRequestID + " header")
	}
	if !strings.HasPrefix(replyTo, ResultPrefix) {
		return "", "", fmt.Errorf("%s header %q is not a result subject", HeaderReplyTo, replyTo)
	}
	return requestID, replyTo, nil
}

// RequestID is the frontend's id of the n-th request it accepted since it started: boot, random per start, keeps the
// ids (and the Nats-Msg-Id built from them) of a frontend restarted under the same id out of the de-duplication
// window of its previous run.
func RequestID(frontendID, boot string, n uint64) string {
	return frontendID + "-" + boot + "-" + strconv.FormatUint(n, 10)
}

// TaskMsgID is the JetStream de-duplication id of the message carrying parent's sub-requests to one variant, so that
// a parent executed twice (after a redelivery) does not enqueue its sub-requests twice. The frontend's root message
// uses parent "".
func TaskMsgID(requestID, parent, task, variant string) string {
	return string(appendTaskMsgID(make([]byte, 0, 64), requestID, parent, task, variant))
}

func appendTaskMsgID(b []byte, requestID, parent, task, variant string) []byte {
	b = append(append(append(append(b, requestID...), '/'), parent...), '>')
	return append(append(append(b, task...), '/'), variant...)
}

// TaskPartMsgID is the de-duplication id of one of the messages a parent's sub-requests to one variant are split
// into (pkg/hop): TaskMsgID and "#" and the numbers of the sub-requests it carries (as in ChildItemID), as runs
// "a-b" joined by ".", or, past maxPartName characters, their FNV-1a hash in hex. A message is named by what it
// carries, so a parent executed again (after a redelivery) republishes the same ids, and one grouped differently
// the second time (another routing draw, another plan) enqueues a sub-request twice rather than not at all.
func TaskPartMsgID(requestID, parent, task, variant string, subs []int) string {
	// Written into one buffer, made into a string once: a worker names every message it forwards so.
	b := append(appendTaskMsgID(make([]byte, 0, 128), requestID, parent, task, variant), '#')
	runs := len(b)
	for i := 0; i < len(subs); {
		j := i
		for j+1 < len(subs) && subs[j+1] == subs[j]+1 {
			j++
		}
		if i > 0 {
			b = append(b, '.')
		}
		b = strconv.AppendInt(b, int64(subs[i]), 10)
		if j > i {
			b = strconv.AppendInt(append(b, '-'), int64(subs[j]), 10)
		}
		i = j + 1
	}
	if len(b)-runs > maxPartName {
		h := fnv.New64a()
		h.Write(b[runs:])
		b = strconv.AppendUint(append(b[:runs], 'h'), h.Sum64(), 16)
	}
	return string(b)
}

// maxPartName bounds the sub-request list in a part's id; longer lists are hashed.
const maxPartName = 64

// RehomedMsgID is the de-duplication id of a message the planner moved from a variant a new plan retired to another
// variant of the same task: the message's own id and the new variant, so that a move done twice (after a
// redelivery) enqueues it once, and does not collide with a message of the same parent sent there directly.
func RehomedMsgID(id, variant string) string {
	return id + "@" + variant
}

// RootItemID is the id of the single item a request starts with; a child of item P is P.i.
const RootItemID = "0"

// ChildItemID names the i-th sub-request of parent.
func ChildItemID(parent string, i int) string { return parent + "." + strconv.Itoa(i) }

// ValidName reports whether s may be used as a pipeline, task, variant or worker name: it becomes a subject token
// and part of stream, consumer and KV key names.
func ValidName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
