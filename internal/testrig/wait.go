// Waits for a condition instead of sleeps, because a sleep long enough for a busy machine is too long everywhere
// else and still too short somewhere: a wait returns as soon as its condition holds and, when it does not, says what
// was awaited. Sleeps stay only where the time itself is the scenario (an outage's length, load for a while).

package testrig

import (
	"fmt"
	"testing"
	"time"
)

// pollEvery is how often waits look at their condition: often enough to add little to a test, seldom enough that
// conditions reading JetStream do not load the server.
const pollEvery = 10 * time.Millisecond

// WaitFor returns nil as soon as cond holds, or an error saying what was awaited once timeout has passed without
// it. It never fails a test itself, so goroutines other than the test's can use it.
func WaitFor(timeout time.Duration, what string, cond func() bool) error {
	end := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(end) {
			return fmt.Errorf("not within %v: %s", timeout, what)
		}
		time.Sleep(pollEvery)
	}
	return nil
}

// Eventually waits until cond holds, failing the test if it does not within timeout. what says what is awaited
// ("worker w1 serves a/x").
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := WaitFor(timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// Consistently checks cond for the whole of d, failing the test as soon as it does not hold. It is for what must not
// happen ("the worker keeps serving a/fast"): d is how long the test gives it to happen, and the test learns at once
// if it does.
func Consistently(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if after, ok := holds(d, cond); !ok {
		t.Fatalf("after %v: no longer %s", after.Round(time.Millisecond), what)
	}
}

// holds reports whether cond holds throughout d, returning as soon as it does not, and after how long.
func holds(d time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for {
		if !cond() {
			return time.Since(start), false
		}
		if time.Since(start) >= d {
			return d, true
		}
		time.Sleep(pollEvery)
	}
}
