package deadline

import (
	"testing"
	"time"
)

func TestExpired(t *testing.T) {
	now := time.Unix(100, 0)
	for _, tc := range []struct {
		deadline time.Time
		want     bool
	}{
		{now.Add(-time.Nanosecond), true},
		{now, true}, // due now: too late to execute
		{now.Add(time.Nanosecond), false},
	} {
		if got := Expired(now, tc.deadline); got != tc.want {
			t.Errorf("Expired(now, now%+v) = %v", tc.deadline.Sub(now), got)
		}
	}
}
