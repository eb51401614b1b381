package control

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestLiveness: a worker that stops refreshing while others go on is gone after the timeout; when every worker
// goes silent at once (the bus), they all stay, and when they come back one by one none is dropped; Grace (the
// planner's own connection came back) gives every live worker a fresh timeout, after which one that does not refresh
// while another does is gone.
func TestLiveness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	l := NewLiveness(5 * time.Second)
	for _, id := range []string{"w1", "w2", "w3"} {
		l.Seen(id, at(0))
	}
	if got := l.Live(at(1)); !slices.Equal(got, []string{"w1", "w2", "w3"}) {
		t.Fatalf("live %v", got)
	}
	// w3 dies; the others refresh.
	for s := 1.0; s <= 6; s++ {
		l.Seen("w1", at(s))
		l.Seen("w2", at(s))
	}
	if got := l.Live(at(6)); !slices.Equal(got, []string{"w1", "w2"}) {
		t.Fatalf("after w3 stopped: live %v, want w1 w2", got)
	}
	if g := l.Gone(); !slices.Equal(g, []string{"w3"}) || l.Known() != 2 || len(l.Gone()) != 0 {
		t.Fatalf("after w3 stopped: gone %v, %d known; want w3 gone once, 2 known", g, l.Known())
	}
	// The bus goes away for 10 s: everyone is silent at once, and stays live.
	for s := 7.0; s <= 16; s++ {
		if got := l.Live(at(s)); !slices.Equal(got, []string{"w1", "w2"}) {
			t.Fatalf("%v s into the outage: live %v, want w1 w2 held", s-6, got)
		}
	}
	// w2 reconnects first; w1 a moment later: w1 is not dropped in between.
	l.Seen("w2", at(16.5))
	if got := l.Live(at(17)); !slices.Equal(got, []string{"w1", "w2"}) {
		t.Fatalf("w2 back first: live %v, want w1 w2", got)
	}
	l.Seen("w1", at(18))
	l.Seen("w2", at(18))
	if got := l.Live(at(19)); !slices.Equal(got, []string{"w1", "w2"}) {
		t.Fatalf("both back: live %v", got)
	}
	// w3, long gone, is not brought back by any of this.
	if slices.Contains(l.Live(at(19)), "w3") {
		t.Fatal("w3 came back to life")
	}
	// The planner's connection comes back after 6 s away: Grace from then.
	l.Grace(at(25))
	for s := 26.0; s <= 29; s++ { // w1 refreshes, w2 no more
		l.Seen("w1", at(s))
	}
	if got := l.Live(at(29)); !slices.Equal(got, []string{"w1", "w2"}) {
		t.Fatalf("4 s after Grace: live %v, want w1 w2", got)
	}
	if g := l.Gone(); len(g) != 0 {
		t.Fatalf("gone %v while the bus was away or just back, want none", g)
	}
	l.Seen("w1", at(30))
	l.Seen("w1", at(31))
	if got := l.Live(at(31)); !slices.Equal(got, []string{"w1"}) {
		t.Fatalf("6 s after Grace, only w1 refreshed: live %v, want w1", got)
	}
	if g := l.Gone(); !slices.Equal(g, []string{"w2"}) {
		t.Fatalf("gone %v, want w2", g)
	}
	if !l.Forget("w1") || len(l.Live(at(31))) != 0 || l.Known() != 0 {
		t.Fatal("a deregistered worker stays live")
	}
	if g := l.Gone(); len(g) != 0 {
		t.Fatalf("a deregistered worker is also gone: %v", g)
	}
}

// TestLivenessStaggeredSilence: heartbeats sent a period apart stop together (the watch that carries them lost its
// consumer): the earliest's Timeout passes while the latest's has not, and still none is gone, looked at every
// 250 ms through 12 s of silence; when they come back, none is dropped.
func TestLivenessStaggeredSilence(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	l := NewLiveness(5 * time.Second)
	ids := []string{"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9"}
	for s := 0.0; s < 10; s++ { // each worker every second, a tenth of a second after the one before
		for i, id := range ids {
			l.Seen(id, at(s+float64(i)/10))
		}
		l.Live(at(s + 1))
	}
	for s := 10.0; s <= 22; s += 0.25 {
		if got := l.Live(at(s)); len(got) != len(ids) {
			t.Fatalf("%.2f s into the silence: live %v, want all ten held", s-9.9, got)
		}
	}
	l.Seen("w9", at(22.1))
	if got := l.Live(at(22.2)); len(got) != len(ids) {
		t.Fatalf("the first heartbeat back: live %v, want all ten", got)
	}
	if g := l.Gone(); len(g) != 0 {
		t.Fatalf("gone %v, want none", g)
	}
}

// TestLivenessForgetsTheDead: many workers that come and die leave nothing behind; a registration already stale
// when first seen (a worker that died while no planner ran) is gone at once.
func TestLivenessForgetsTheDead(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := NewLiveness(5 * time.Second)
	l.Seen("stays", t0)
	l.Seen("dead-before", t0.Add(-time.Minute))
	if got := l.Live(t0); !slices.Equal(got, []string{"stays"}) || !slices.Equal(l.Gone(), []string{"dead-before"}) {
		t.Fatalf("live %v; want stays live and dead-before gone", got)
	}
	now := t0
	for i := range 1000 {
		now = now.Add(100 * time.Millisecond)
		l.Seen("stays", now)
		l.Seen(fmt.Sprintf("w%d", i), now)
		l.Live(now)
	}
	now = now.Add(6 * time.Second)
	l.Seen("stays", now)
	if got := l.Live(now); !slices.Equal(got, []string{"stays"}) || l.Known() != 1 {
		t.Fatalf("live %v, %d known; want only stays", got, l.Known())
	}
	if n := len(l.Gone()); n != 1000 {
		t.Fatalf("%d gone, want 1000", n)
	}
}
