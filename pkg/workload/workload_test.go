package workload

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestArrivalProcess checks the mean rate and the coefficient of variation of the inter-arrival times.
func TestArrivalProcess(t *testing.T) {
	for _, cv := range []float64{1, 0.5, 2, 4} {
		w := Constant(200, 500*time.Second)
		w.CV = cv
		a := w.Arrivals(7)
		var prev time.Duration
		var n int
		var sum, sum2 float64
		for {
			at, ok := a.Next()
			if !ok {
				break
			}
			if at < prev {
				t.Fatalf("cv %v: arrivals out of order", cv)
			}
			d := (at - prev).Seconds()
			sum, sum2, n, prev = sum+d, sum2+d*d, n+1, at
		}
		if rate := float64(n) / 500; math.Abs(rate-200) > 200*0.03*max(1, cv) {
			t.Errorf("cv %v: rate %.1f, want 200", cv, rate)
		}
		mean := sum / float64(n)
		got := math.Sqrt(sum2/float64(n)-mean*mean) / mean
		if math.Abs(got-cv) > 0.05*cv {
			t.Errorf("cv %v: measured coefficient of variation %.3f", cv, got)
		}
	}
}

// TestFollowsCurve: the arrivals of each step of a stepped workload match its rate.
func TestFollowsCurve(t *testing.T) {
	w, err := Parse("steps:50:100s,400:100s,10:100s", 1)
	if err != nil {
		t.Fatal(err)
	}
	if w.Duration() != 300*time.Second {
		t.Fatalf("duration %v", w.Duration())
	}
	counts := make([]int, 3)
	a := w.Arrivals(1)
	for {
		at, ok := a.Next()
		if !ok {
			break
		}
		counts[int(at/(100*time.Second))]++
	}
	for i, want := range []float64{5000, 40000, 1000} {
		if math.Abs(float64(counts[i])-want) > 4*math.Sqrt(want) {
			t.Errorf("step %d: %d arrivals, want about %v", i, counts[i], want)
		}
	}
	// Same seed, same arrivals.
	b1, b2 := w.Arrivals(3), w.Arrivals(3)
	for range 1000 {
		x, _ := b1.Next()
		y, _ := b2.Next()
		if x != y {
			t.Fatal("the same seed drew different arrivals")
		}
	}
}

func TestDiurnal(t *testing.T) {
	w, err := Parse("diurnal:50:900:24h", 1)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range w.Rates {
		lo, hi = min(lo, r), max(hi, r)
	}
	if lo != 50 || hi != 900 || w.Duration() < 23*time.Hour {
		t.Fatalf("diurnal range %v-%v over %v", lo, hi, w.Duration())
	}
	if w.Rates[0] > 200 || w.Rates[len(w.Rates)/2] < 600 {
		t.Fatalf("want a trough at the start and a peak near the middle: %v ... %v", w.Rates[0], w.Rates[len(w.Rates)/2])
	}
}

// TestDiurnalShift: a shifted day is the same day started later (its peak half a day on), and a shift of a day or
// more is refused.
func TestDiurnalShift(t *testing.T) {
	day, err := Parse("diurnal:50:900:1h", 1)
	if err != nil {
		t.Fatal(err)
	}
	shifted, err := Parse("diurnal:50:900:1h:30m", 1)
	if err != nil {
		t.Fatal(err)
	}
	n := len(day.Rates)
	if len(shifted.Rates) != n || shifted.Rates[0] != day.Rates[n/2] || shifted.Rates[n/2] != day.Rates[0] {
		t.Fatalf("shifted by half a day: starts at %v (the day's middle is %v)", shifted.Rates[0], day.Rates[n/2])
	}
	for _, bad := range []string{"diurnal:50:900:1h:1h", "diurnal:50:900:1h:-1m", "diurnal:50:900:1h:x"} {
		if _, err := Parse(bad, 1); err == nil {
			t.Errorf("%s taken", bad)
		}
	}
}

func TestReadTrace(t *testing.T) {
	azure := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n" +
		"2023-11-16 18:15:51.2224670,879,55\n2023-11-16 18:15:51.3910170,91,16\n"
	times, counts, err := ReadTrace(strings.NewReader(azure))
	if err != nil {
		t.Fatal(err)
	}
	if len(times) != 4 || times[0] != 0 || times[3] != 4710427*time.Microsecond {
		t.Fatalf("times %v", times)
	}
	if len(counts) != 5 || counts[0] != 1 || counts[4] != 3 {
		t.Fatalf("counts %v", counts)
	}
	if _, counts, err = ReadTrace(strings.NewReader("second,count\n0,3\n1,5\n2,0\n")); err != nil || len(counts) != 3 || counts[1] != 5 {
		t.Fatalf("counts format: %v %v", counts, err)
	}
	if times, _, err = ReadTrace(strings.NewReader("0.5\n0.1\n2.25\n")); err != nil || times[1] != 400*time.Millisecond {
		t.Fatalf("seconds format: %v %v", times, err)
	}
	for _, bad := range []string{"", "a,b\n", "0.5\nyesterday\n", "t,count\n1,-2\n"} {
		if _, _, err := ReadTrace(strings.NewReader(bad)); err == nil {
			t.Errorf("trace %q: no error", bad)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, bad := range []string{"", "constant", "constant:-1:10s", "constant:10:0s", "steps:10", "diurnal:9:1:1h",
		"diurnal:1:9", "trace:", "trace:/nonexistent.csv", "poisson:10:10s"} {
		if _, err := Parse(bad, 1); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := Parse("constant:10:10s", -1); err == nil {
		t.Error("negative cv: no error")
	}
}
