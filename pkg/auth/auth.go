// Package auth holds what each Sleipnir role may do on NATS: the one source of the subject permissions that both the
// deployment's server configuration (deploy/nats-auth.conf, RenderConf) and the embedded server of `sleipnir up`
// (ServerNkeys) are made from.
//
// Config-file users of nats-server have no permission templates (those exist only for JWT users' scoped signing
// keys), so a worker's "own heartbeat" is a user per worker: an nkey each, whose permissions name its id.
package auth

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// Role is what a NATS user of Sleipnir is.
type Role string

const (
	// Planner alone declares the streams, consumers and the KV bucket, and writes specs, plans and assignments.
	Planner Role = "planner"
	// Frontend accepts requests, enqueues their root tasks, reads results, and alone reports demand.
	Frontend Role = "frontend"
	// Worker executes and forwards task messages, reports results, and writes its own heartbeat only.
	Worker Role = "worker"
	// Client sends requests to sleipnir.infer.> and receives its replies, nothing else.
	Client Role = "client"
	// Observer is a client that may also read the KV bucket (loadgen --steps reports the plan in force).
	Observer Role = "observer"
)

// Inbox is the inbox prefix the user's connections use (nats.CustomInboxPrefix), named after the user: services'
// under wire.InboxPrefix, clients' under wire.ClientInboxPrefix. Each user may read its own prefix only.
func (u User) Inbox() string {
	if u.Role == Client || u.Role == Observer {
		return wire.ClientInboxPrefix(u.Name())
	}
	return wire.InboxPrefix(u.Name())
}

// Permissions are the subjects user u may publish and subscribe to: its role's, with its own inbox prefix, and for
// a worker its own heartbeat key.
func Permissions(u User) (*server.Permissions, error) {
	for what, name := range map[string]string{"worker id": u.WorkerID, "tenant": u.Tenant} {
		if name != "" && !wire.ValidName(name) {
			return nil, fmt.Errorf("%s %q: use letters, digits, '_' and '-' only", what, name)
		}
	}
	if u.Tenant != "" && u.Role != Client {
		return nil, fmt.Errorf("user %s: only clients have tenants", u.Name())
	}
	r, workerID := u.Role, u.WorkerID
	inbox := u.Inbox() + ".>"
	// Reading the bucket: bind (stream info), get (direct or not), watch (an ordered push consumer, re-created
	// after resets, with flow control). Creating a consumer on the bucket's stream reads it and writes nothing.
	kvRead := streamRead(wire.KVStream)
	tasks := wire.TaskPrefix + ">"
	p := &server.Permissions{Publish: &server.SubjectPermission{}, Subscribe: &server.SubjectPermission{}}
	switch r {
	case Planner:
		p.Publish.Allow = []string{"$JS.API.>", wire.KVSubject(">"), "$JS.ACK.>", "$JS.FC.>", tasks}
		p.Subscribe.Allow = append([]string{wire.DemandPrefix + ">", inbox, wire.PlannerStatusSubject()},
			microSubjects(wire.ServicePlanner)...)
		p.Response = monitoringResponses()
	case Frontend:
		// Frontends answer clients on the clients' inboxes. Not by response permissions (allow_responses): the
		// server keeps those in memory, so one restarted forgets them and refuses every reply to a request delivered
		// before the restart (measured: 55 requests lost in make chaos's nats-restart).
		p.Publish.Allow = append(kvRead, tasks, wire.DemandPrefix+">", wire.ClientInboxes)
		p.Subscribe.Allow = append([]string{wire.InferPrefix + ">", wire.ResultPrefix + ">", inbox,
			wire.FrontendStatusSubject("*")}, microSubjects(wire.ServiceFrontend)...)
		// Frontends confirm the workers' result messages (sent as requests) with one reply each, on the workers'
		// inboxes, which hold the workers' JetStream replies too: a frontend may not publish there otherwise. A
		// restarted server forgets these permissions, but a worker whose confirmation is refused sends its result
		// again, as a new request.
		p.Response = monitoringResponses()
	case Worker:
		if workerID == "" {
			return nil, errors.New("a worker user needs its worker id")
		}
		// Task streams are named per pipeline, and a worker serves whichever variant it is assigned: it may look up,
		// pull from and acknowledge on any consumer, but not on the bucket's stream.
		// It sets aside in the dead-letter stream the task messages it will not execute (its publish
		// acknowledgements come to its inbox).
		p.Publish.Allow = append(kvRead, wire.KVSubject(wire.WorkerKey(workerID)), tasks, wire.ResultPrefix+"*",
			wire.DeadLetterSubjects, "$JS.API.CONSUMER.INFO.*.*", "$JS.API.CONSUMER.MSG.NEXT.*.*", "$JS.ACK.>")
		p.Publish.Deny = []string{"$JS.API.CONSUMER.MSG.NEXT." + wire.KVStream + ".*", "$JS.ACK." + wire.KVStream + ".>"}
		p.Subscribe.Allow = append([]string{inbox, wire.WorkerStatusSubject(workerID)}, microSubjects(wire.ServiceWorker)...)
		p.Response = monitoringResponses()
	case Client:
		p.Publish.Allow = []string{wire.InferPrefix + ">"}
		p.Subscribe.Allow = []string{inbox}
	case Observer:
		// Observers may also ask the services' micro endpoints ($SRV.PING, INFO, STATS; the status endpoints), and
		// read the messages set aside (`nats stream view`: an ephemeral consumer on the stream, pulled and acked).
		p.Publish.Allow = append([]string{wire.InferPrefix + ">", micro.APIPrefix + ".>", wire.StatusPrefix + ">"}, kvRead...)
		p.Publish.Allow = append(p.Publish.Allow, streamRead(wire.DeadLetterStream)...)
		p.Publish.Allow = append(p.Publish.Allow, "$JS.API.CONSUMER.MSG.NEXT."+wire.DeadLetterStream+".*",
			"$JS.ACK."+wire.DeadLetterStream+".>")
		p.Subscribe.Allow = []string{inbox}
	default:
		return nil, fmt.Errorf("unknown role %q", r)
	}
	return p, nil
}

// streamRead are the subjects of reading a stream: bind (stream info), get (direct or not), and watch or page through
// it (an ephemeral consumer, made again after resets, with flow control). Creating a consumer on a stream reads it
// and writes nothing.
func streamRead(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.DIRECT.GET." + stream,
		"$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.CONSUMER.CREATE." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.DELETE." + stream + ".>",
		"$JS.API.CONSUMER.INFO." + stream + ".>",
		"$JS.FC." + stream + ".>",
	}
}

// microSubjects are the subjects the NATS micro framework answers a service's PING, INFO and STATS on: for every
// service, for the service's name, and for one instance of it.
func microSubjects(service string) []string {
	return []string{micro.APIPrefix + ".*", micro.APIPrefix + ".*." + service, micro.APIPrefix + ".*." + service + ".*"}
}

// monitoringResponses let the planner and workers answer a request sent to their micro and status endpoints, and
// frontends a worker's result message, once, and publish nowhere else in the askers' inboxes. (Frontends answer
// clients through publish permissions: see Permissions.) A response permission is the server's memory, lost when it
// restarts: for a monitoring question, which is asked again, and a result message, sent again, that is fine.
func monitoringResponses() *server.ResponsePermission {
	return &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
}

// User is one NATS user: a role, for a worker its id, and for a client perhaps its tenant.
type User struct {
	Role     Role
	WorkerID string
	// Tenant names a client user of its own, "client-<tenant>", whose replies no other user may read; empty is the
	// deployment's "client".
	Tenant string
	// Nkey is the user's public nkey; empty renders a reference to the environment variable NkeyVar().
	Nkey string
}

// Name names the user: its role, "worker-<id>" or "client-<tenant>".
func (u User) Name() string {
	switch {
	case u.Role == Worker:
		return "worker-" + u.WorkerID
	case u.Tenant != "":
		return string(u.Role) + "-" + u.Tenant
	}
	return string(u.Role)
}

// NkeyVar is the environment variable the rendered configuration reads the user's public nkey from.
func (u User) NkeyVar() string {
	return "SLEIPNIR_NKEY_" + strings.ToUpper(strings.NewReplacer("-", "_").Replace(u.Name()))
}

// DeployWorkers is how many worker users the checked-in deploy/nats-auth.conf has (w01...).
const DeployWorkers = 20

// DeployUsers are the users of a deployment with n workers named w01, w02...: one planner, one frontend user
// (shared by every frontend), a client, an observer, a worker user per worker, and a client user per tenant
// (client-<tenant>).
func DeployUsers(n int, tenants ...string) []User {
	users := []User{{Role: Planner}, {Role: Frontend}, {Role: Client}, {Role: Observer}}
	for _, id := range WorkerIDs(n) {
		users = append(users, User{Role: Worker, WorkerID: id})
	}
	for _, t := range tenants {
		users = append(users, User{Role: Client, Tenant: t})
	}
	return users
}

// WorkerIDs are the ids of n deployed workers: w01, w02, ...
func WorkerIDs(n int) []string {
	width := max(2, len(strconv.Itoa(n)))
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%0*d", width, i+1)
	}
	return ids
}

// RenderConf writes the authorization block of a nats-server configuration granting each user its role's
// permissions.
func RenderConf(users []User) (string, error) {
	var b strings.Builder
	b.WriteString("# Generated by `sleipnir nats-auth` from pkg/auth: edit that, not this.\n")
	b.WriteString("# Each user is an nkey; its public key comes from the environment variable named (no secret here).\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, u := range users {
		p, err := Permissions(u)
		if err != nil {
			return "", err
		}
		key := "$" + u.NkeyVar()
		if u.Nkey != "" {
			key = strconv.Quote(u.Nkey)
		}
		fmt.Fprintf(&b, "    # %s\n    {\n      nkey: %s\n      permissions: {\n", u.Name(), key)
		writeSubjects(&b, "publish", p.Publish)
		writeSubjects(&b, "subscribe", p.Subscribe)
		if r := p.Response; r != nil {
			fmt.Fprintf(&b, "        allow_responses: { max: %d, expires: %q }\n", r.MaxMsgs, r.Expires.String())
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

func writeSubjects(b *strings.Builder, kind string, p *server.SubjectPermission) {
	quote := func(subjects []string) string {
		q := make([]string, len(subjects))
		for i, s := range subjects {
			q[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	fmt.Fprintf(b, "        %s: { allow: %s", kind, quote(p.Allow))
	if len(p.Deny) > 0 {
		fmt.Fprintf(b, ", deny: %s", quote(p.Deny))
	}
	b.WriteString(" }\n")
}

// ServerNkeys are the users of an embedded server (server.Options.Nkeys): each user's public key must be set.
func ServerNkeys(users []User) ([]*server.NkeyUser, error) {
	out := make([]*server.NkeyUser, 0, len(users))
	for _, u := range users {
		if u.Nkey == "" {
			return nil, fmt.Errorf("user %s has no public nkey", u.Name())
		}
		p, err := Permissions(u)
		if err != nil {
			return nil, err
		}
		out = append(out, &server.NkeyUser{Nkey: u.Nkey, Permissions: p})
	}
	return out, nil
}

// NewNkey makes a user's key pair: its public key, and its seed (the secret).
func NewNkey() (public string, seed []byte, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", nil, err
	}
	if public, err = kp.PublicKey(); err != nil {
		return "", nil, err
	}
	seed, err = kp.Seed()
	return public, seed, err
}
