package frontend

import (
	"cmp"
	"flag"
	"strconv"
)

// RegisterFlags binds the frontend's settings to fs, the one place they are named as flags: `sleipnir frontend` and
// `sleipnir up` take the same ones. c's values are the flags' defaults, and zero ones the package's (Default*);
// the process's identity (--id) is the command's, not a setting.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.HTTPAddr, "http", c.HTTPAddr, "KServe v2 HTTP address (empty disables it)")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", cmp.Or(c.MaxRequestBytes, DefaultMaxRequestBytes),
		"largest request payload accepted")
	fs.IntVar(&c.IntakeWorkers, "intake-workers", cmp.Or(c.IntakeWorkers, DefaultIntakeWorkers),
		"requests decoded and published at once")
	fs.IntVar(&c.IntakeQueue, "intake-queue", cmp.Or(c.IntakeQueue, DefaultIntakeQueue),
		"requests that may wait for an intake worker; more are refused as overloaded")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", cmp.Or(c.MaxInFlight, DefaultMaxInFlight),
		"requests held at once, from arrival to reply; more are refused as overloaded")
	fs.IntVar(&c.RequestBacklog, "request-backlog", cmp.Or(c.RequestBacklog, DefaultRequestBacklog),
		"requests that may wait for the frontend to take them in; more are dropped unanswered, and counted")
	fs.DurationVar(&c.MaxTimeout, "max-timeout", c.MaxTimeout, "furthest ahead a request's deadline may be "+
		"(default the larger of 1m and 10 SLOs)")
	fs.Var(onFlag{off: &c.NoAdmission}, "admission", "admission control: refuse at once requests whose deadline the plan's "+
		"fastest path cannot meet, and, while the pipeline misses deadlines, those beyond what its workers answer "+
		"in time (docs/admission.md); false: only the bounds above refuse")
}

// onFlag is a boolean flag, true by default, that sets *off to its negation: --admission=false sets NoAdmission.
type onFlag struct{ off *bool }

func (f onFlag) String() string {
	if f.off == nil || *f.off { // the zero onFlag reads false, so that the usage shows the default true
		return "false"
	}
	return "true"
}

func (f onFlag) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*f.off = !on
	return nil
}

func (f onFlag) IsBoolFlag() bool { return true }
