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
	users := auth.DeployUsers(*workers)
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
