package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
)

// TestNATSAuthKeys: `sleipnir nats-auth --keys` writes a private seed per user and the environment file whose public
// keys are those seeds', and never overwrites a key.
func TestNATSAuthKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := runNATSAuth([]string{"--keys", dir, "--workers", "2"}); err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(filepath.Join(dir, "nats-server.env"))
	if err != nil {
		t.Fatal(err)
	}
	users := auth.DeployUsers(2)
	if n := strings.Count(string(env), "\n"); n != len(users) {
		t.Fatalf("nats-server.env has %d lines for %d users", n, len(users))
	}
	for _, u := range users {
		seedFile := filepath.Join(dir, u.Name()+".nk")
		st, err := os.Stat(seedFile)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", seedFile, st.Mode().Perm())
		}
		seed, _ := os.ReadFile(seedFile)
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
		if err != nil {
			t.Fatalf("%s: %v", seedFile, err)
		}
		pub, _ := kp.PublicKey()
		if !strings.Contains(string(env), u.NkeyVar()+"="+pub+"\n") {
			t.Errorf("nats-server.env does not give %s the public key of %s", u.NkeyVar(), seedFile)
		}
	}
	if err := runNATSAuth([]string{"--keys", dir, "--workers", "2"}); err == nil {
		t.Error("a second run overwrote the keys")
	}
}

// TestNATSAuthTenants: `--clients a,b` adds a client user per tenant, with a seed each and permission to read its own
// inbox prefix only; a tenant named twice, or not fit for a subject and a file name, is refused before any file.
func TestNATSAuthTenants(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "auth.conf")
	if err := runNATSAuth([]string{"--keys", filepath.Join(dir, "secrets"), "--workers", "1", "--clients", "a,b",
		"--conf", conf}); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"a", "b"} {
		u := auth.User{Role: auth.Client, Tenant: tenant}
		if _, err := os.Stat(filepath.Join(dir, "secrets", u.Name()+".nk")); err != nil {
			t.Error(err)
		}
		if want := `subscribe: { allow: ["` + u.Inbox() + `.>"] }`; !strings.Contains(string(text), want) {
			t.Errorf("the configuration lacks %s", want)
		}
	}
	for _, bad := range []string{"a,a", "a,,b", "a.*", "../x"} {
		out := filepath.Join(t.TempDir(), "secrets")
		if err := runNATSAuth([]string{"--keys", out, "--clients", bad}); err == nil {
			t.Errorf("--clients %q accepted", bad)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("--clients %q: keys made before the refusal", bad)
		}
	}
}
