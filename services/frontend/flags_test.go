package frontend

import (
	"flag"
	"io"
	"testing"
)

// TestAdmissionFlag: admission control is on unless --admission=false.
func TestAdmissionFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		off  bool
	}{{nil, false}, {[]string{"--admission"}, false}, {[]string{"--admission=false"}, true},
		{[]string{"--admission=true"}, false}} {
		var c Config
		fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if c.NoAdmission != tc.off {
			t.Errorf("%v: NoAdmission %v, want %v", tc.args, c.NoAdmission, tc.off)
		}
	}
	var c Config
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--admission=maybe"}); err == nil {
		t.Error("--admission=maybe: want an error")
	}
}
