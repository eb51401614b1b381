package chaos

import (
	"bytes"
	"strings"
	"testing"
)

func TestTables(t *testing.T) {
	rows := []Row{
		{Fault: "worker-kill", Sent: 100, OK: 99, ViolationsPct: 1, RecoveryS: 2.5, Pass: true, Notes: []string{"killed w01"}},
		{Fault: "nats-restart", Sent: 100, OK: 90, Lost: 3, ViolationsPct: 10, RecoveryS: -1,
			Failures: []string{"3 requests lost"}},
		{Fault: "forged-plan", Skipped: "needs users"},
	}
	var text, md bytes.Buffer
	WriteTable(&text, rows)
	WriteMarkdown(&md, rows)
	for _, want := range []string{"worker-kill", "pass", "FAIL: 3 requests lost", "never", "skipped: needs users", "worker-kill: killed w01"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text table lacks %q:\n%s", want, text.String())
		}
	}
	if n := strings.Count(md.String(), "\n"); n != 5 {
		t.Errorf("markdown table has %d lines, want 5:\n%s", n, md.String())
	}
	if !strings.Contains(md.String(), "| nats-restart | 100 | 90 | 3 | 0 | 10.0% (0.0%) | never | 0 | fail: 3 requests lost |") {
		t.Errorf("markdown row:\n%s", md.String())
	}
}
