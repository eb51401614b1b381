package bus

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
	"github.com/sleipnir-serving/sleipnir/pkg/auth"
	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                         "nats://127.0.0.1:4222",
		"nats://alice:s3cret@127.0.0.1:4222":            "nats://alice:xxxxx@127.0.0.1:4222",
		"nats://s3cret@host:4222":                       "nats://xxxxx@host:4222",
		"tls://a:s3cret@h1:4222, nats://b:s3cret@h2:42": "tls://a:xxxxx@h1:4222,nats://b:xxxxx@h2:42",
		"alice:s3cret@host:4222":                        "xxxxx@host:4222",
		"nats://alice:s3%cret@host:4222":                "nats://xxxxx@host:4222",
		"127.0.0.1:4222":                                "127.0.0.1:4222",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func realServer(t *testing.T, conf string) *natsproc.Server {
	t.Helper()
	if _, err := natsproc.Binary(); err != nil {
		t.Skip(err)
	}
	s, err := natsproc.Start(natsproc.Config{StoreDir: t.TempDir(), Conf: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// syncBuffer is a log destination safe for the client's callback goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestPasswordNeverLogged: a password given in the URL appears neither in the log of a reconnect (which printed the
// URL in clear) nor in a connection error.
func TestPasswordNeverLogged(t *testing.T) {
	s := realServer(t, "authorization { user: alice, password: s3cretpw }\n")
	logs := captureLogs(t)

	url := strings.Replace(s.URL(), "nats://", "nats://alice:s3cretpw@", 1)
	nc, err := Connect(url, "test", nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s.Kill()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "NATS reconnected"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no reconnect logged: %s", logs.String())
		}
	}
	if strings.Contains(logs.String(), "s3cretpw") {
		t.Errorf("the password is in the log:\n%s", logs.String())
	}

	port, err := natsproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Connect(fmt.Sprintf("nats://alice:s3cretpw@127.0.0.1:%d", port), "test", nats.MaxReconnects(0))
	if err == nil || strings.Contains(err.Error(), "s3cretpw") || !strings.Contains(err.Error(), "alice:xxxxx@") {
		t.Errorf("connection error %v: want the URL redacted", err)
	}
}

// TestUserPassword: --user takes its password from --password-file, else from the environment, never from the URL.
func TestUserPassword(t *testing.T) {
	s := realServer(t, "authorization { user: alice, password: s3cretpw }\n")
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("s3cretpw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvPassword, "")
	connect := func(a ClientAuth) error {
		opts, err := a.Options()
		if err != nil {
			return err
		}
		nc, err := Connect(s.URL(), "test", append(opts, nats.MaxReconnects(0))...)
		if err == nil {
			nc.Close()
		}
		return err
	}
	if err := connect(ClientAuth{User: "alice", PasswordFile: file}); err != nil {
		t.Errorf("password file: %v", err)
	}
	if err := connect(ClientAuth{User: "alice"}); err == nil || !strings.Contains(err.Error(), "no password") {
		t.Errorf("no password: %v", err)
	}
	t.Setenv(EnvPassword, "s3cretpw")
	if err := connect(ClientAuth{User: "alice"}); err != nil {
		t.Errorf("password from %s: %v", EnvPassword, err)
	}
	if err := connect(ClientAuth{}); err == nil {
		t.Error("connected without credentials")
	}
	if _, err := (ClientAuth{User: "alice", NkeyFile: file}).Options(); err == nil {
		t.Error("two kinds of credentials accepted")
	}
}

// writePEM writes one PEM block to dir/name and returns its path.
func writePEM(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// issue makes a key and a certificate for it signed by ca (self-signed when ca is nil); it returns the certificate
// and key files, and the certificate and key for signing others.
func issue(t *testing.T, dir, name string, tmpl *x509.Certificate, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (string, string, *x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	if ca == nil {
		ca, caKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name+"-cert.pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", keyDER), cert, key
}

// TestTLSClientCertificate: against a real nats-server that requires TLS and verifies client certificates, a
// connection with --tls-ca and a client certificate works; one without the certificate, or without TLS, is refused.
func TestTLSClientCertificate(t *testing.T) {
	dir := t.TempDir()
	caFile, _, ca, caKey := issue(t, dir, "ca", &x509.Certificate{Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	srvCert, srvKey, _, _ := issue(t, dir, "server", &x509.Certificate{Subject: pkix.Name{CommonName: "nats"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}, ca, caKey)
	cliCert, cliKey, _, _ := issue(t, dir, "client", &x509.Certificate{Subject: pkix.Name{CommonName: "worker"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, caKey)
	s := realServer(t, fmt.Sprintf("tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true }\n",
		srvCert, srvKey, caFile))

	connect := func(a ClientAuth) (*nats.Conn, error) {
		opts, err := a.Options()
		if err != nil {
			return nil, err
		}
		return Connect(s.URL(), "test", append(opts, nats.MaxReconnects(0))...)
	}
	nc, err := connect(ClientAuth{TLSCA: caFile, TLSCert: cliCert, TLSKey: cliKey})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if !nc.TLSRequired() {
		t.Error("connected without TLS")
	}
	sub, err := nc.SubscribeSync("tls.check")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("tls.check", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("round trip over TLS: %v", err)
	}
	if nc, err := connect(ClientAuth{TLSCA: caFile}); err == nil {
		nc.Close()
		t.Error("connected without a client certificate")
	}
	if nc, err := connect(ClientAuth{}); err == nil {
		nc.Close()
		t.Error("connected without TLS")
	}
	if _, err := (ClientAuth{TLSCert: cliCert}).Options(); err == nil {
		t.Error("--tls-cert without --tls-key accepted")
	}
}

// TestBindWaitsForThePlanner: BindBucket and BindVariantConsumer wait until the bucket and the consumer exist, and
// never make them.
func TestBindWaitsForThePlanner(t *testing.T) {
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	nc, err := ConnectInProcess(s, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := BindBucket(short, js); err == nil {
		t.Fatal("bound a bucket nobody made")
	}
	if _, err := js.KeyValue(ctx, wire.Bucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("after a bind that gave up, the bucket lookup says %v: the bind made it", err)
	}

	got := make(chan error, 2)
	go func() {
		_, err := BindBucket(ctx, js)
		got <- err
	}()
	go func() {
		_, err := BindVariantConsumer(ctx, js, "p", "a", "x")
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // the scenario: the binds keep waiting while nothing is made
	select {
	case err := <-got:
		t.Fatalf("a bind returned (%v) before the planner made anything", err)
	default:
	}
	if _, err := OpenBucket(ctx, js, jetstream.MemoryStorage, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureTaskStream(ctx, js, "p", jetstream.MemoryStorage, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureVariantConsumer(ctx, js, "p", "a", "x", 0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a bind did not return once the planner had made the bucket and the consumer")
		}
	}
}

// TestPermissionViolationLogged: what the server refuses a service is logged (nats.go drops it otherwise, and the
// service only sees its requests time out), at most a few lines per period however often it recurs.
func TestPermissionViolationLogged(t *testing.T) {
	pub, seed, err := auth.NewNkey()
	if err != nil {
		t.Fatal(err)
	}
	users, err := auth.ServerNkeys([]auth.User{{Role: auth.Client, Nkey: pub}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir(), Nkeys: users})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	logs := captureLogs(t)
	opts, err := ClientAuth{NkeySeed: seed}.Options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ConnectInProcess(s, "test", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for range 20 {
		if err := nc.Publish(wire.DemandSubject("p"), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for end := time.Now().Add(3 * time.Second); !strings.Contains(logs.String(), wire.DemandSubject("p")); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the refused publish was not logged: %q", logs.String())
		}
	}
	time.Sleep(100 * time.Millisecond) // the log lines of the other refusals would be here by now
	if n := strings.Count(logs.String(), "NATS refused a permission"); n > 5 {
		t.Errorf("%d lines for 20 refusals: not rate-limited", n)
	}
}

// TestAuthFlags: each connection flag defaults to its environment variable, and the password has no flag.
func TestAuthFlags(t *testing.T) {
	t.Setenv(EnvNkey, "seed.nk")
	t.Setenv(EnvTLSCA, "ca.pem")
	var a ClientAuth
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	a.RegisterFlags(fs)
	if err := fs.Parse([]string{"--tls-cert", "c.pem", "--tls-key", "k.pem"}); err != nil {
		t.Fatal(err)
	}
	if a.NkeyFile != "seed.nk" || a.TLSCA != "ca.pem" || a.TLSCert != "c.pem" || a.TLSKey != "k.pem" {
		t.Errorf("flags gave %+v", a)
	}
	if fs.Lookup("password") != nil {
		t.Error("a --password flag would show the password in ps")
	}
}

// TestSeveralURLs: --nats may list several servers, comma-separated; a connection takes one that answers.
func TestSeveralURLs(t *testing.T) {
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	dead, err := natsproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	urls := fmt.Sprintf("nats://127.0.0.1:%d, %s", dead, s.ClientURL())
	nc, err := Connect(urls, "test", nats.DontRandomize())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.ConnectedUrl() != s.ClientURL() {
		t.Errorf("connected to %s, want %s", nc.ConnectedUrl(), s.ClientURL())
	}
}
