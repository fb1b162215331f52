package policy

import (
	"testing"
	"time"
)

func TestTierSizes(t *testing.T) {
	for _, c := range []struct{ configured, usable, want int64 }{
		{0, 16 << 30, 4 << 30}, {1 << 20, 16 << 30, 1 << 20}, {0, 3, 1}, {0, 0, 0}, {0, -1, 0},
	} {
		if got := ArenaBudget(c.configured, c.usable); got != c.want {
			t.Errorf("ArenaBudget(%d, %d) = %d, want %d", c.configured, c.usable, got, c.want)
		}
	}
	for _, c := range []struct{ configured, free, want int64 }{
		{0, 100 << 30, 25 << 30}, {5 << 30, 100 << 30, 5 << 30}, {0, -1, DefaultSSDQuota}, {0, 0, 1}, {0, 3, 1},
	} {
		if got := SSDQuota(c.configured, c.free); got != c.want {
			t.Errorf("SSDQuota(%d, %d) = %d, want %d", c.configured, c.free, got, c.want)
		}
	}
}

func TestRunningEstimates(t *testing.T) {
	if got := SwitchCostEstimate(0, 40*time.Millisecond); got != 10*time.Millisecond {
		t.Errorf("first switch: %v", got)
	}
	if got := SwitchCostEstimate(10*time.Millisecond, 10*time.Millisecond); got != 10*time.Millisecond {
		t.Errorf("steady: %v", got)
	}
	if got := ReadRateEstimate(100e6, 50e6, time.Second); got != 75e6 {
		t.Errorf("read rate: %v", got)
	}
	if got := ReadRateEstimate(100e6, 10, time.Hour); got != 0.5*100e6+0.5*MinReadBPS {
		t.Errorf("a trickle counts as MinReadBPS: %v", got)
	}
	if got := ReadRateEstimate(100e6, 0, time.Second); got != 100e6 {
		t.Errorf("nothing read keeps the estimate: %v", got)
	}
}
