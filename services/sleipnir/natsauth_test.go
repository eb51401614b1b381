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
