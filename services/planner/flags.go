package planner

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/bus"
	"github.com/sleipnir-serving/sleipnir/pkg/control"
	"github.com/sleipnir-serving/sleipnir/pkg/pipeline"
	"github.com/sleipnir-serving/sleipnir/pkg/plan"
)

// Flags are the planner's settings as flags, bound in one place: `sleipnir planner` and `sleipnir up` take the
// same ones. Config gives the planner's Config once they are parsed.
type Flags struct {
	storage  *string
	replicas *int
	ackWait  *time.Duration
	dlAge    *time.Duration
	dlBytes  *int64
	prices   *string
	control  *control.Flags
}

// RegisterFlags binds the planner's flags, the control loop's among them (control.RegisterFlags), to fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	return &Flags{
		storage: fs.String("storage", "file", "JetStream storage of task streams and the KV bucket: file or memory"),
		replicas: fs.Int("replicas", 0, "copies of the task streams and the KV bucket the NATS cluster keeps (0: 3 on "+
			"a cluster of three servers or more, else 1); a stream that already has more keeps them"),
		ackWait: fs.Duration("ack-wait", bus.DefaultAckWait, "the variant consumers' ack wait: how long a fetched "+
			"message may stay unacknowledged before another replica gets it (workers mark batches that run longer "+
			"in progress)"),
		dlAge: fs.Duration("deadletter-max-age", bus.DefaultDeadLetterMaxAge, "how long the dead-letter stream keeps "+
			"a task message a worker set aside"),
		dlBytes: fs.Int64("deadletter-max-bytes", bus.DefaultDeadLetterMaxBytes, "the dead-letter stream's size "+
			"bound, in bytes (the oldest messages go first)"),
		prices: fs.String("price", "", "hourly price of a server of each class, `CLASS=PRICE,...` (e.g. "+
			"cpu=0.4,fast=2.5): plans then use the cheapest servers and report their cost (docs/classes.md)"),
		control: control.RegisterFlags(fs),
	}
}

// Config is the planner's configuration of specs as the parsed flags give it (Metrics and Logger are the
// caller's to set).
func (f *Flags) Config(specs []*pipeline.Spec) (Config, error) {
	st, err := ParseStorage(*f.storage)
	if err != nil {
		return Config{}, err
	}
	if *f.dlAge <= 0 || *f.dlBytes <= 0 {
		return Config{}, errors.New("--deadletter-max-age and --deadletter-max-bytes must be positive")
	}
	cc, err := f.control.Config()
	if err != nil {
		return Config{}, err
	}
	system, err := f.control.System(specs...)
	if err != nil {
		return Config{}, err
	}
	prices, err := plan.ParsePrices(*f.prices)
	if err != nil {
		return Config{}, fmt.Errorf("--price: %w", err)
	}
	return Config{Pipelines: specs, Storage: st, Replicas: *f.replicas, System: system, AckWait: *f.ackWait,
		DeadLetterMaxAge: *f.dlAge, DeadLetterMaxBytes: *f.dlBytes, Prices: prices, Config: cc}, nil
}

// ParseStorage reads a --storage value: file or memory.
func ParseStorage(s string) (jetstream.StorageType, error) {
	switch s {
	case "file":
		return jetstream.FileStorage, nil
	case "memory":
		return jetstream.MemoryStorage, nil
	}
	return 0, fmt.Errorf("--storage %q: want file or memory", s)
}
