package bus

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Environment variables of the connection flags. The password has no flag: a flag's value shows in `ps`.
const (
	EnvCreds        = "SLEIPNIR_NATS_CREDS"
	EnvNkey         = "SLEIPNIR_NATS_NKEY"
	EnvUser         = "SLEIPNIR_NATS_USER"
	EnvPassword     = "SLEIPNIR_NATS_PASSWORD"
	EnvPasswordFile = "SLEIPNIR_NATS_PASSWORD_FILE"
	EnvTLSCA        = "SLEIPNIR_NATS_TLS_CA"
	EnvTLSCert      = "SLEIPNIR_NATS_TLS_CERT"
	EnvTLSKey       = "SLEIPNIR_NATS_TLS_KEY"
)

// ClientAuth is how a connection proves who it is (at most one of a credentials file, an nkey seed, or a user and
// password) and how it checks the server (TLS). The zero value connects anonymously, without TLS.
type ClientAuth struct {
	CredsFile string // a .creds file (user JWT and seed)
	NkeyFile  string // a file holding an nkey seed ("SU...")
	// NkeySeed is an nkey seed held in memory (the embedded server's users of `sleipnir up`).
	NkeySeed     []byte
	User         string
	PasswordFile string // the password: this file's first line, else $SLEIPNIR_NATS_PASSWORD
	TLSCA        string // PEM CA bundle the server's certificate must chain to
	TLSCert      string // client certificate (PEM), for servers that verify clients
	TLSKey       string
}

// RegisterFlags adds --creds, --nkey, --user, --password-file, --tls-ca, --tls-cert and --tls-key to fs, each
// defaulting to its environment variable.
func (a *ClientAuth) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&a.CredsFile, "creds", os.Getenv(EnvCreds), "NATS credentials file (env "+EnvCreds+")")
	fs.StringVar(&a.NkeyFile, "nkey", os.Getenv(EnvNkey), "file holding the NATS user's nkey seed (env "+EnvNkey+")")
	fs.StringVar(&a.User, "user", os.Getenv(EnvUser), "NATS user; the password comes from --password-file or env "+
		EnvPassword+" (env "+EnvUser+")")
	fs.StringVar(&a.PasswordFile, "password-file", os.Getenv(EnvPasswordFile), "file whose first line is the NATS "+
		"user's password (env "+EnvPasswordFile+")")
	fs.StringVar(&a.TLSCA, "tls-ca", os.Getenv(EnvTLSCA), "PEM CA certificates to verify the NATS server with; "+
		"connects with TLS (env "+EnvTLSCA+")")
	fs.StringVar(&a.TLSCert, "tls-cert", os.Getenv(EnvTLSCert), "PEM client certificate for NATS (env "+EnvTLSCert+")")
	fs.StringVar(&a.TLSKey, "tls-key", os.Getenv(EnvTLSKey), "PEM key of --tls-cert (env "+EnvTLSKey+")")
}

// Options are the nats.go options that carry a.
func (a ClientAuth) Options() ([]nats.Option, error) {
	var opts []nats.Option
	given := 0
	for _, set := range []bool{a.CredsFile != "", a.NkeyFile != "", len(a.NkeySeed) > 0, a.User != ""} {
		if set {
			given++
		}
	}
	if given > 1 {
		return nil, errors.New("NATS authentication: give one of --creds, --nkey or --user")
	}
	switch {
	case a.CredsFile != "":
		if _, err := os.Stat(a.CredsFile); err != nil {
			return nil, fmt.Errorf("--creds: %w", err)
		}
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	case a.NkeyFile != "":
		o, err := nats.NkeyOptionFromSeed(a.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w", a.NkeyFile, err)
		}
		opts = append(opts, o)
	case len(a.NkeySeed) > 0:
		kp, err := nkeys.FromSeed(a.NkeySeed)
		if err != nil {
			return nil, fmt.Errorf("nkey seed: %w", err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	case a.User != "":
		pw := os.Getenv(EnvPassword)
		if a.PasswordFile != "" {
			data, err := os.ReadFile(a.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("--password-file: %w", err)
			}
			pw, _, _ = strings.Cut(string(data), "\n")
			pw = strings.TrimSuffix(pw, "\r")
		}
		if pw == "" {
			return nil, fmt.Errorf("--user %s: no password (--password-file or env %s)", a.User, EnvPassword)
		}
		opts = append(opts, nats.UserInfo(a.User, pw))
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if a.TLSCert != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	return opts, nil
}

// RedactURL hides the secrets in a NATS URL, or a comma-separated list of them, for logs and errors: the password
// of user:password@ and a token (a user name without password, as NATS reads it) become xxxxx.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		u, err := url.Parse(p)
		if err != nil || !strings.Contains(p, "://") {
			// Not a URL url.Parse reads right ("user:pw@host:4222" parses as scheme "user"): hide all before '@'.
			if at := strings.LastIndex(p, "@"); at >= 0 {
				start := 0
				if k := strings.Index(p, "://"); k >= 0 && k < at {
					start = k + 3
				}
				p = p[:start] + "xxxxx" + p[at:]
			}
			parts[i] = p
			continue
		}
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			} else {
				u.User = url.User("xxxxx")
			}
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
