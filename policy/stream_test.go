package policy

import (
	"testing"
	"time"
)

func TestHoldFrame(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name   string
		since  time.Duration
		first  bool
		window time.Duration
		want   bool
	}{
		{"first frame of a call goes at once", 0, true, 2 * ms, false},
		{"a token right after the last write waits", 300 * time.Microsecond, false, 2 * ms, true},
		{"just inside the window waits", 2*ms - 1, false, 2 * ms, true},
		{"a window's age goes at once", 2 * ms, false, 2 * ms, false},
		{"slow tokens go one by one", 30 * ms, false, 2 * ms, false},
		{"window 0: never held", 0, false, 0, false},
		{"negative window: never held", 0, false, -1, false},
	} {
		if got := HoldFrame(c.since, c.first, c.window); got != c.want {
			t.Errorf("%s: HoldFrame(%v, %v, %v) = %v, want %v", c.name, c.since, c.first, c.window, got, c.want)
		}
	}
}
