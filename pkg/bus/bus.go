// Package bus is the NATS plumbing every service shares: the embedded server, connections, the task streams and
// variant consumers, the KV bucket, and KV watches that survive reconnects. It makes no decisions.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/ratelog"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// ServerConfig configures an embedded NATS server with JetStream.
type ServerConfig struct {
	// StoreDir holds JetStream's files.
	StoreDir string
	Host     string
	// Port for clients: 0 does not listen (in-process connections only), -1 picks a free port.
	Port int
	// MaxPayload is the largest message, in bytes (default 8 MiB).
	MaxPayload int32
	// Nkeys, if not empty, are the only users the server admits, each with its permissions (pkg/auth).
	Nkeys []*server.NkeyUser
	// NoAuthUser is the public nkey of the user connections without credentials are taken for ("" refuses them).
	NoAuthUser string
}

// StartServer starts an embedded NATS server with JetStream and waits until it accepts connections.
func StartServer(cfg ServerConfig) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("embedded NATS server: no JetStream store directory")
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = 8 << 20
	}
	if cfg.Port > 0 {
		// Fail at once, and clearly, when the port is taken (the server itself would only log it).
		l, err := net.Listen("tcp", net.JoinHostPort(hostOr(cfg.Host), strconv.Itoa(cfg.Port)))
		if err != nil {
			return nil, fmt.Errorf("embedded NATS server cannot listen on port %d: %w", cfg.Port, err)
		}
		l.Close()
	}
	opts := &server.Options{
		ServerName: "sleipnir", JetStream: true, StoreDir: cfg.StoreDir,
		Host: cfg.Host, Port: cfg.Port, DontListen: cfg.Port == 0,
		MaxPayload: cfg.MaxPayload, NoLog: true, NoSigs: true, Nkeys: cfg.Nkeys, NoAuthUser: cfg.NoAuthUser,
	}
	opts.Host = hostOr(opts.Host)
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("embedded NATS server not ready after 10s")
	}
	return s, nil
}

func hostOr(h string) string {
	if h == "" {
		return "127.0.0.1"
	}
	return h
}

// Connect dials a NATS server (url may list several, comma-separated), reconnecting forever if the connection is
// lost. Errors and logs show url redacted (RedactURL).
func Connect(url, name string, opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(url, append(connOptions(name), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURL(url), err)
	}
	return nc, nil
}

// ConnectInProcess connects to an embedded server without a socket.
func ConnectInProcess(s *server.Server, name string, opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect("", append(connOptions(name), append(opts, nats.InProcessServer(s))...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to the embedded NATS server: %w", err)
	}
	return nc, nil
}

func connOptions(name string) []nats.Option {
	// Without a handler nats.go drops the server's asynchronous errors, and a missing permission would show only as
	// requests timing out.
	refused := ratelog.New(slog.Default(), 0, 0)
	return []nats.Option{
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			switch {
			case errors.Is(err, nats.ErrPermissionViolation):
				refused.Error("NATS refused a permission", "conn", name, "err", err)
			case errors.Is(err, nats.ErrSlowConsumer) && sub != nil:
				// Once per spell of drops; the subscription's owner counts every dropped message (Drops).
				msgs, bytes, _ := sub.PendingLimits()
				dropped, _ := sub.Dropped()
				refused.Warn("NATS dropped messages over a subscription's pending limits", "conn", name,
					"subject", sub.Subject, "limit_msgs", msgs, "limit_bytes", bytes, "dropped_so_far", dropped)
			default:
				refused.Warn("NATS asynchronous error", "conn", name, "err", err)
			}
		}),
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(64 << 20),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				slog.Warn("NATS disconnected", "conn", name, "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { slog.Info("NATS reconnected", "conn", name, "url", nc.ConnectedUrlRedacted()) }),
	}
}

// EnsureTaskStream creates or updates the work-queue stream holding a pipeline's variant subjects, with replicas
// copies (0: DefaultReplicas), or more if the stream already has more: an operator's choice is never lowered.
func EnsureTaskStream(ctx context.Context, js jetstream.JetStream, pipeline string, storage jetstream.StorageType, replicas int) (jetstream.Stream, error) {
	name := wire.TaskStream(pipeline)
	have := 0
	if s, err := js.Stream(ctx, name); err == nil {
		have = s.CachedInfo().Config.Replicas
	}
	replicas = keptReplicas(js.Conn(), name, have, replicas)
	return js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "Sleipnir task queues of pipeline " + pipeline + ", one subject per model variant",
		Subjects:    []string{wire.TaskSubjects(pipeline)},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     storage,
		Replicas:    replicas,
		Discard:     jetstream.DiscardOld,
		// Items are useless after their deadline; this only bounds what a stopped variant leaves behind.
		MaxAge:     10 * time.Minute,
		Duplicates: 2 * time.Minute,
	})
}

// DefaultReplicas is how many copies of the task streams and the KV bucket a cluster keeps unless told otherwise:
// 3 (one node of three may be lost) on a cluster of three servers or more, else 1.
func DefaultReplicas(nc *nats.Conn) int {
	if ClusterSize(nc) >= 3 {
		return 3
	}
	return 1
}

// ClusterSize is how many servers the cluster nc is connected to has, as the connection knows them: 1 for a server
// that reports no cluster, else the distinct servers among the URLs given and those the cluster announces.
func ClusterSize(nc *nats.Conn) int {
	if nc.ConnectedClusterName() == "" {
		return 1
	}
	seen := map[string]bool{}
	for _, u := range nc.Servers() {
		if p, err := url.Parse(u); err == nil && p.Host != "" {
			seen[p.Host] = true
		}
	}
	return max(1, len(seen))
}

// keptReplicas is the replicas a stream that has `have` should have: want (0: DefaultReplicas), or have if more.
func keptReplicas(nc *nats.Conn, stream string, have, want int) int {
	if want <= 0 {
		want = DefaultReplicas(nc)
	}
	if have > want {
		slog.Info("keeping the stream's replicas, more than configured", "stream", stream, "replicas", have,
			"configured", want)
		return have
	}
	return want
}

// DefaultAckWait is how long a variant's message may stay unacknowledged before JetStream delivers it to another
// replica: short, because requests have deadlines of about a second, so that the work of a replica that died goes to
// another in time. Workers mark batches that run longer as in progress.
const DefaultAckWait = 2 * time.Second

// SetAsideAt is the delivery at which a worker sets a task message aside instead of executing it (the worker's
// bound): the variant consumers deliver a message at most SetAsideAt+1 times (MaxDeliver), the last one held in
// reserve for a set-aside that failed (the dead-letter stream did not confirm it). Legitimate redeliveries stay
// well under it: a worker killed (+1), a NATS restart or a node lost (+1 or 2: the messages delivered and not yet
// acknowledged), a message handed back because it did not fit a batch (+1 each time, at most pkg/batching.HandBacks
// times; then the replica carries it to its next batch), a forwarding failure (+1 each retry while the deadline allows; the backoff below spaces them from the
// third delivery on). A message past its deadline is dropped, not executed, so only a long deadline (or the policy
// `none`) lets a message that kills its worker come back this often.
const SetAsideAt = 6

// TaskBackOff is how long the variant consumers wait for each delivery's acknowledgement before delivering again
// (JetStream's BackOff, which replaces the ack wait; entries past the last repeat it): the ack wait for the first
// two deliveries, so that the work of a worker killed, or lost in a NATS restart, goes to another replica within
// the ack wait as before, then doubling (for a 2 s ack wait: 2, 2, 4, 8, 16 s), so that a message that kills every
// worker that takes it kills at most SetAsideAt-1 of them, over half a minute, not one every ack wait.
func TaskBackOff(ackWait time.Duration) []time.Duration {
	return []time.Duration{ackWait, ackWait, 2 * ackWait, 4 * ackWait, 8 * ackWait}
}

// EnsureVariantConsumer creates or updates the durable pull consumer that all replicas of a variant share.
func EnsureVariantConsumer(ctx context.Context, js jetstream.JetStream, pipeline, task, variant string, ackWait time.Duration) (jetstream.Consumer, error) {
	if ackWait == 0 {
		ackWait = DefaultAckWait
	}
	return js.CreateOrUpdateConsumer(ctx, wire.TaskStream(pipeline), jetstream.ConsumerConfig{
		Durable: wire.Consumer(task, variant),
		Description: "Sleipnir queue of variant " + wire.VariantKey{Task: task, Variant: variant}.String() +
			" of pipeline " + pipeline + ", shared by its replicas",
		FilterSubject: wire.TaskSubject(pipeline, task, variant),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		BackOff:       TaskBackOff(ackWait),
		// The default (1000) silently stops delivery once reached.
		MaxAckPending: 100000,
		MaxDeliver:    SetAsideAt + 1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
}

// SetAsideDue reports whether a message delivered the delivered-th time by a consumer delivering at most
// maxDeliver times (its config's MaxDeliver; -1 or 0: unbounded) is to be set aside rather than executed: at the
// delivery before the last (see SetAsideAt), and at the last.
func SetAsideDue(delivered uint64, maxDeliver int) bool {
	return maxDeliver > 1 && delivered >= uint64(maxDeliver-1)
}

// Dead-letter stream retention defaults (planner --deadletter-max-age, --deadletter-max-bytes): a week of poison
// for an operator to look at, in at most 256 MiB (the oldest go first).
const (
	DefaultDeadLetterMaxAge   = 7 * 24 * time.Hour
	DefaultDeadLetterMaxBytes = 256 << 20
)

// EnsureDeadLetterStream creates or updates the stream of the task messages workers set aside (the planner's: the
// others only publish to it), with limits retention bounded by maxAge and maxBytes (0: the defaults), replicas
// copies as EnsureTaskStream, and de-duplication on the messages' own ids, so that a message set aside twice (the
// reserve delivery after an unconfirmed set-aside) is kept once.
func EnsureDeadLetterStream(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType, replicas int,
	maxAge time.Duration, maxBytes int64) (jetstream.Stream, error) {
	if maxAge <= 0 {
		maxAge = DefaultDeadLetterMaxAge
	}
	if maxBytes <= 0 {
		maxBytes = DefaultDeadLetterMaxBytes
	}
	have := 0
	if s, err := js.Stream(ctx, wire.DeadLetterStream); err == nil {
		have = s.CachedInfo().Config.Replicas
	}
	return js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        wire.DeadLetterStream,
		Description: "Sleipnir task messages set aside by workers (poison): headers, reason, payload",
		Subjects:    []string{wire.DeadLetterSubjects},
		Retention:   jetstream.LimitsPolicy,
		Storage:     storage,
		Replicas:    keptReplicas(js.Conn(), wire.DeadLetterStream, have, replicas),
		Discard:     jetstream.DiscardOld,
		MaxAge:      maxAge,
		MaxBytes:    maxBytes,
		Duplicates:  2 * time.Minute,
	})
}

// OpenBucket creates or opens the KV bucket of specs, plans, assignments and registrations: the planner's, which
// owns it. Other services bind (BindBucket). The bucket keeps replicas copies (0: DefaultReplicas): one that has
// fewer is raised, one that has more is left so.
func OpenBucket(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType, replicas int) (jetstream.KeyValue, error) {
	cfg := jetstream.KeyValueConfig{Bucket: wire.Bucket, History: 1, Storage: storage, Replicas: replicas,
		Description: "Sleipnir pipelines, plans, assignments and worker registrations"}
	kv, err := js.KeyValue(ctx, wire.Bucket)
	if err == nil {
		st, err := kv.Status(ctx)
		if err != nil {
			return nil, err
		}
		bs, ok := st.(*jetstream.KeyValueBucketStatus)
		if !ok {
			return kv, nil
		}
		info := bs.StreamInfo()
		have := info.Config.Replicas
		if cfg.Replicas = keptReplicas(js.Conn(), info.Config.Name, have, replicas); cfg.Replicas == have {
			return kv, nil
		}
		slog.Info("raising the KV bucket's replicas", "bucket", wire.Bucket, "from", have, "to", cfg.Replicas)
		return js.UpdateKeyValue(ctx, cfg)
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	cfg.Replicas = keptReplicas(js.Conn(), wire.Bucket, 0, replicas)
	kv, err = js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return js.KeyValue(ctx, wire.Bucket)
	}
	return kv, err
}

// bindRetry is how often BindBucket and BindVariantConsumer look again for what the planner has not made yet.
const bindRetry = 250 * time.Millisecond

// BindBucket returns the KV bucket once the planner has created it, looking again until ctx is done. It never creates
// or updates the bucket, so a service that binds needs no permission on JetStream's create and update API.
func BindBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	for {
		kv, err := js.KeyValue(ctx, wire.Bucket)
		if err == nil {
			return kv, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			slog.Debug("KV bucket lookup failed; retrying", "bucket", wire.Bucket, "err", err)
		}
		if !sleep(ctx, bindRetry) {
			return nil, fmt.Errorf("KV bucket %s: %w (the planner creates it: is it running?)", wire.Bucket, err)
		}
	}
}

// BindVariantConsumer returns a variant's durable consumer, which the planner creates (with its ack wait) before any
// plan hosts the variant, looking again until ctx is done. It never creates or updates the consumer.
func BindVariantConsumer(ctx context.Context, js jetstream.JetStream, pipeline, task, variant string) (jetstream.Consumer, error) {
	for {
		c, err := js.Consumer(ctx, wire.TaskStream(pipeline), wire.Consumer(task, variant))
		if err == nil {
			return c, nil
		}
		if !sleep(ctx, bindRetry) {
			return nil, fmt.Errorf("consumer %s of stream %s: %w", wire.Consumer(task, variant), wire.TaskStream(pipeline), err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// HeaderCarrier lets OpenTelemetry propagators read and write trace context in NATS headers. Set keeps the key's
// case, so "traceparent" stays lower case as other languages expect.
type HeaderCarrier nats.Header

// Get returns the first value of key.
func (h HeaderCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return nats.Header(h).Get(key)
}

// Set sets key to value, keeping the key's case.
func (h HeaderCarrier) Set(key, value string) { h[key] = []string{value} }

// Keys lists the header keys.
func (h HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// NotReady says err is JetStream not being ready yet, which a declaration tried again later may get past: a
// server or cluster whose JetStream is starting or electing its meta leader (503, or no responder to the API), or
// an API request that timed out.
func NotReady(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.Code == 503 {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, nats.ErrJetStreamNotEnabled)
}
