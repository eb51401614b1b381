package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
)

// Auth makes the suite run against a server with users and permissions, as a deployment would.
type Auth struct {
	// Conf is the nats-server configuration (its authorization or accounts section); the suite sets the port and
	// the store on the command line.
	Conf string
	// Users holds who each process connects as, by process name (planner, fe1, fe2, w01, ..., client: loadgen and
	// the suite's own connection), else by role (planner, frontend, worker, client).
	Users map[string]User
}

// User is one NATS user: an nkey seed file (--nkey) or a name and a password file (--user, --password-file), the
// services' and loadgen's flags.
type User struct {
	NkeyFile     string
	Name         string
	PasswordFile string
	// Inbox is the user's own inbox prefix, where a client user (loadgen's --inbox-prefix, the suite's own
	// connection) receives replies; empty: loadgen's default. The services name theirs after their own user.
	Inbox string
}

// DeployAuth is the deployment's own users and permissions (pkg/auth, as deploy/nats-auth.conf renders them) with a
// fresh nkey per user, their seeds written to dir: the planner, the frontends' user, a worker user per worker id,
// the client (loadgen, crafted and forged messages) and the observer (the suite's own connection).
func DeployAuth(dir string, workers int) (*Auth, error) {
	users := auth.DeployUsers(workers)
	a := &Auth{Users: map[string]User{}}
	for i := range users {
		pub, seed, err := auth.NewNkey()
		if err != nil {
			return nil, err
		}
		users[i].Nkey = pub
		file := filepath.Join(dir, users[i].Name()+".nk")
		if err := os.WriteFile(file, seed, 0o600); err != nil {
			return nil, err
		}
		who := string(users[i].Role)
		if users[i].Role == auth.Worker {
			who = users[i].WorkerID
		}
		a.Users[who] = User{NkeyFile: file, Inbox: users[i].Inbox()}
	}
	conf, err := auth.RenderConf(users)
	if err != nil {
		return nil, err
	}
	// As deploy/nats-server.conf sets it.
	a.Conf = "max_payload: 8MB\n" + conf
	return a, nil
}

func (a *Auth) user(name, role string) (User, bool) {
	if a == nil {
		return User{}, false
	}
	if u, ok := a.Users[name]; ok {
		return u, true
	}
	u, ok := a.Users[role]
	return u, ok
}

func (a *Auth) args(name, role string) []string {
	u, ok := a.user(name, role)
	switch {
	case !ok:
		return nil
	case u.NkeyFile != "":
		return []string{"--nkey", u.NkeyFile}
	}
	return []string{"--user", u.Name, "--password-file", u.PasswordFile}
}

func (a *Auth) options(name, role string) ([]nats.Option, error) {
	if a == nil {
		return nil, nil
	}
	u, ok := a.user(name, role)
	if !ok {
		return nil, fmt.Errorf("no NATS user for %s (role %s)", name, role)
	}
	var opts []nats.Option
	if u.Inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(u.Inbox))
	}
	if u.NkeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(u.NkeyFile)
		return append(opts, o), err
	}
	pw, err := os.ReadFile(u.PasswordFile)
	if err != nil {
		return nil, err
	}
	first, _, _ := strings.Cut(string(pw), "\n")
	return append(opts, nats.UserInfo(u.Name, strings.TrimSpace(first))), nil
}
