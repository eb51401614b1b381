package chaos

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sleipnir-serving/sleipnir/internal/natsproc"
)

func TestRecovery(t *testing.T) {
	good := Second{Sent: 100, OK: 100}
	bad := func(v int) Second { return Second{Sent: 100, OK: 100 - v, Violations: v} }
	tests := []struct {
		name    string
		series  []Second
		faultAt float64
		window  int
		want    float64
		settled bool
	}{
		{"never rose", []Second{good, good, good, good, good}, 1.5, 1, 0, true},
		{"rose and settled", []Second{good, bad(30), bad(5), good, good, good}, 1.2, 1, 1.8, true},
		{"a relapse counts", []Second{good, bad(30), good, bad(2), good, good}, 1.2, 1, 2.8, true},
		{"1% is a violation, under it is not", []Second{good, bad(1), good, good}, 0.5, 1, 1.5, true},
		{"the last, partial, second is left out", []Second{good, bad(9), good, {Sent: 3, Violations: 3}}, 0.5, 1, 1.5, true},
		{"not settled by the end", []Second{good, bad(9), good, bad(50), good}, 0.5, 1, 0, false},
		{"violations before the fault only", []Second{bad(9), good, good, good}, 2, 1, 0, true},
		// Over 3 s windows: one straggler after clean seconds is under 1%; a relapse near the fault is not, nor
		// is 1% kept up for a few seconds.
		{"a straggler after clean seconds", []Second{good, bad(50), good, good, good, bad(1), good, good, good, good},
			0.5, 3, 1.5, true},
		{"a straggler in one-second windows", []Second{good, bad(50), good, good, good, bad(1), good, good, good, good},
			0.5, 1, 5.5, true},
		{"a relapse within the window", []Second{good, bad(50), good, bad(1), good, good, good}, 0.5, 3, 3.5, true},
		{"1% kept up", []Second{good, bad(50), good, good, bad(1), bad(1), bad(1), good, good, good, good}, 0.5, 3,
			6.5, true},
		{"not settled by the end, in windows", []Second{good, bad(50), good, good, bad(9), good}, 0.5, 3, 0, false},
	}
	for _, tc := range tests {
		got, settled := Recovery(tc.series, tc.faultAt, 0.01, tc.window)
		if settled != tc.settled || settled && (got < tc.want-1e-9 || got > tc.want+1e-9) {
			t.Errorf("%s: %.2f %v, want %.2f %v", tc.name, got, settled, tc.want, tc.settled)
		}
	}
}

// TestShortSuite runs the short version against real processes: a standalone nats-server, the planner, two
// frontends and ten workers built from this tree, under loadgen's load. Under worker kill and a crafted request,
// nothing may be lost, no reply duplicated, no process crash, and the crafted request must be answered. The
// recovery time is reported but not held to here (on a busy test machine, seconds of violations are noise; `make
// chaos` holds it to 5 s).
func TestShortSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the services as processes for about a minute")
	}
	cfg, faults := shortSuite(t, false)
	rows, err := Run(t.Context(), cfg, faults)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	WriteTable(&table, rows)
	t.Logf("\n%s", table.String())
	for _, r := range rows {
		if r.Sent == 0 {
			t.Errorf("%s: no load measured", r.Fault)
		}
		if r.Lost > 0 || r.Duplicates > 0 || len(r.Crashes) > 0 {
			t.Errorf("%s: lost %d, duplicates %d, crashes %v", r.Fault, r.Lost, r.Duplicates, r.Crashes)
		}
		for _, f := range r.Failures {
			if !strings.HasPrefix(f, "recovery") && !strings.HasPrefix(f, "violations did not settle") &&
				!strings.Contains(f, "lost") && !strings.Contains(f, "duplicate") && !strings.Contains(f, "crashed") {
				t.Errorf("%s: %s", r.Fault, f)
			}
		}
	}
}

// shortSuite is the short version's configuration (binaries built from this tree, logs kept in
// $SLEIPNIR_CHAOS_LOGS if set) and its faults: the cluster's or the others. It skips without a nats-server.
func shortSuite(t *testing.T, cluster bool) (Config, []Fault) {
	t.Helper()
	if _, err := natsproc.Binary(); err != nil {
		t.Skip(err)
	}
	bin, root := buildBinaries(t)
	faults, err := Select(nil, true, cluster)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Sleipnir: filepath.Join(bin, "sleipnir"), Loadgen: filepath.Join(bin, "loadgen"),
		Pipeline: filepath.Join(root, "examples", "traffic.yaml"), Progress: testWriter{t},
		Dir: os.Getenv("SLEIPNIR_CHAOS_LOGS")}
	cfg.Short()
	return cfg, faults
}

// buildBinaries builds bin/sleipnir and bin/loadgen from this tree into a temporary directory; root is the
// module's.
func buildBinaries(t *testing.T) (bin, root string) {
	t.Helper()
	bin = t.TempDir()
	root, _ = filepath.Abs("../..")
	for _, pkg := range []string{"sleipnir:./cmd/sleipnir", "loadgen:./cmd/loadgen"} {
		name, path, _ := strings.Cut(pkg, ":")
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, name), path)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", path, err, out)
		}
	}
	return bin, root
}

// TestNodeLoss runs the short version of the node-loss suite against real processes: three clustered nats-server
// processes, the planner, two frontends and ten workers given all three URLs, under loadgen's load at 100 QPS. The
// node that leads the task stream is SIGKILLed (node-stream-leader) and, on a fresh cluster, stopped gracefully in
// lame-duck mode (node-graceful); each stays down 12 s. Requests may be lost only if a frontend or loadgen was
// connected to it, and only those in flight when it went; ok replies must resume within 10 s of the kill (a raft
// election takes 4 to 9 s) and within 1 s of the graceful stop; the node's return loses nothing (its violations are
// reported: `make node-loss` holds them to 1%). With the state at
// R1 (SLEIPNIR_NODELOSS_PLANNER_ARGS="--replicas 1") replies wait for the node's return, 12 s: over the kill's bound.
func TestNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster and the services as processes for about two minutes")
	}
	cfg, faults := shortSuite(t, true)
	cfg.Nodes = 3
	cfg.PlannerArgs = strings.Fields(os.Getenv("SLEIPNIR_NODELOSS_PLANNER_ARGS"))
	cfg.Dir = os.Getenv("SLEIPNIR_CHAOS_LOGS") // the processes' logs are kept there; by default they are removed
	// Each process in its own network namespace where the machine allows it, so that the cluster is crossed over a
	// real network path; else on loopback.
	if err := NetnsAvailable(); err == nil {
		cfg.Netns = true
	} else {
		t.Logf("on loopback: %v", err)
	}
	// As `make node-loss` measures: the node down 12 s, 20 s measured from the fault.
	cfg.After = 20 * time.Second
	rows, err := Run(t.Context(), cfg, faults)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	WriteTable(&table, rows)
	t.Logf("\n%s", table.String())
	if len(rows) == 0 {
		t.Fatal("no node fault ran")
	}
	var unmeasured []string
	for _, r := range rows {
		if r.Sent == 0 || r.Skipped != "" {
			t.Errorf("%s: no load measured (%s)", r.Fault, r.Skipped)
		}
		if r.Duplicates > 0 || len(r.Crashes) > 0 {
			t.Errorf("%s: duplicates %d, crashes %v", r.Fault, r.Duplicates, r.Crashes)
		}
		if r.BaselinePct >= unservedPct {
			// Not a node's loss to judge: the system did not serve before it.
			unmeasured = append(unmeasured, fmt.Sprintf("%s: %.0f%% violations before the fault", r.Fault, r.BaselinePct))
			continue
		}
		// The recovery of violations under 1%, and the violations after the node's return, are reported, not held
		// to (noise on a busy machine: every second's share of late replies follows the machine's load); the
		// node-loss bounds are, and nothing lost after the return.
		for _, f := range r.Failures {
			if !strings.HasPrefix(f, "recovery") && !strings.HasPrefix(f, "violations did not settle") &&
				!strings.HasPrefix(f, "the node's return was not quiet") {
				t.Errorf("%s: %s", r.Fault, f)
			}
		}
	}
	if len(unmeasured) > 0 && !t.Failed() {
		t.Skipf("the machine was too busy for the system to serve before the fault, so its loss was not judged (%s)",
			strings.Join(unmeasured, "; "))
	}
}

// unservedPct is the share of violations before the fault at which a node-loss row is not judged: on a machine that
// busy (load average 30 on 2 cores, seen) requests arrive at the frontends past their deadline, with no fault at all.
const unservedPct = 50

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestForgeryCheck: against a server whose client user may only send requests, a forged result is reported
// refused, and a publish the client may make is reported as accepted (a failure of the row).
func TestForgeryCheck(t *testing.T) {
	if _, err := natsproc.Binary(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "client.password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := `authorization { users: [
  {user: client, password: s3cret,
   permissions: {publish: {allow: ["sleipnir.infer.>"]}, subscribe: {allow: ["_INBOX.>"]}}}
]}`
	srv, err := natsproc.Start(natsproc.Config{StoreDir: dir, Conf: conf})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	users := map[string]User{RoleClient: {Name: "client", PasswordFile: pwFile}}
	s := &System{cfg: &Config{Auth: &Auth{Conf: conf, Users: users}}, Server: srv}
	notes, failures, err := s.expectRefused("sleipnir.result.fe1", []byte("forged"))
	if err != nil || len(failures) > 0 || len(notes) == 0 {
		t.Errorf("forged result: notes %v, failures %v, err %v; want it refused", notes, failures, err)
	}
	if _, failures, err = s.expectRefused("sleipnir.infer.traffic", []byte("allowed")); err != nil || len(failures) == 0 {
		t.Errorf("an allowed publish was reported refused (failures %v, err %v)", failures, err)
	}
}
