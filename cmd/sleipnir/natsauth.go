package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/auth"
)

// runNATSAuth renders the authorization block of nats-server's configuration for a deployment, and makes its keys:
// one nkey seed file per user, and the environment file that hands the server their public keys.
func runNATSAuth(args []string) error {
	fs := flag.NewFlagSet("nats-auth", flag.ContinueOnError)
	workers := fs.Int("workers", auth.DeployWorkers, "number of worker users (w01, w02, ...)")
	conf := fs.String("conf", "", "write the authorization block here ('-': standard output); deploy/nats-auth.conf is "+
		"this for the default --workers")
	clients := fs.String("clients", "", "comma-separated tenants, each a client user of its own (client-<tenant>, "+
		"inbox prefix _INBOX.client-<tenant>) besides the deployment's client and observer")
	keys := fs.String("keys", "", "make a new nkey per user in this directory: <user>.nk (the seed, mode 0600, for the "+
		"service's --nkey) and nats-server.env (the public keys, for the server's environment)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *conf == "" && *keys == "" {
		return errors.New("give --conf, --keys or both")
	}
	if *workers < 0 {
		return fmt.Errorf("--workers %d: want 0 or more", *workers)
	}
	tenants, err := tenantList(*clients)
	if err != nil {
		return err
	}
	users := auth.DeployUsers(*workers, tenants...)
	if *conf != "" {
		text, err := auth.RenderConf(users)
		if err != nil {
			return err
		}
		if *conf == "-" {
			fmt.Print(text)
		} else if err := os.WriteFile(*conf, []byte(text), 0o644); err != nil {
			return err
		}
	}
	if *keys == "" {
		return nil
	}
	if err := os.MkdirAll(*keys, 0o700); err != nil {
		return err
	}
	var env strings.Builder
	for _, u := range users {
		pub, seed, err := auth.NewNkey()
		if err != nil {
			return err
		}
		// O_EXCL: never overwrite a key a running service may hold.
		f, err := os.OpenFile(filepath.Join(*keys, u.Name()+".nk"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = f.Write(append(seed, '\n'))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(&env, "%s=%s\n", u.NkeyVar(), pub)
	}
	envFile := filepath.Join(*keys, "nats-server.env")
	if err := os.WriteFile(envFile, []byte(env.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %d seeds and %s\n", len(users), envFile)
	return nil
}

// tenantList splits --clients: each tenant once, and a name fit for a user and a file name (before any file is made).
func tenantList(list string) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	tenants := strings.Split(list, ",")
	seen := map[string]bool{}
	for _, t := range tenants {
		if seen[t] || t == "" {
			return nil, fmt.Errorf("--clients %q: tenant %q empty or twice", list, t)
		}
		seen[t] = true
		if _, err := auth.Permissions(auth.User{Role: auth.Client, Tenant: t}); err != nil {
			return nil, fmt.Errorf("--clients: %w", err)
		}
	}
	return tenants, nil
}
