package policy

import (
	"testing"
	"time"
)

func TestEngineQuantumBoundsTheSwitchShare(t *testing.T) {
	for _, sw := range []time.Duration{time.Microsecond, 3 * time.Millisecond, 2 * time.Second} {
		q := EngineQuantum(sw)
		share := float64(sw) / float64(sw+q)
		if share > MaxSwitchShare+1e-9 || share < MaxSwitchShare-1e-6 {
			t.Errorf("switch %v, quantum %v: switches take %.3f of the engine, want %.2f", sw, q, share, MaxSwitchShare)
		}
	}
	if q := EngineQuantum(0); q != 0 {
		t.Errorf("free switch: quantum %v, want 0", q)
	}
	if q := EngineQuantum(-time.Second); q != 0 {
		t.Errorf("negative switch cost: quantum %v, want 0", q)
	}
}

func TestShouldYieldByTime(t *testing.T) {
	q := 100 * time.Millisecond
	for _, c := range []struct {
		name                       string
		held, holderUse, waiterUse time.Duration
		want                       bool
	}{
		{"a short turn preempts a long prefill at its next step", 10 * time.Millisecond, 30 * time.Second, 50 * time.Millisecond, true},
		{"a long prefill does not interrupt the short turn", 500 * time.Millisecond, 550 * time.Millisecond, 30 * time.Second, false},
		{"peers alternate by quantum", 150 * time.Millisecond, 2 * time.Second, 1800 * time.Millisecond, true},
		{"peers keep the engine within a quantum", 50 * time.Millisecond, 2 * time.Second, 1800 * time.Millisecond, false},
		{"a waiter with no use (status, load) goes next", 0, time.Millisecond, 0, true},
	} {
		if got := ShouldYield(c.held, q, c.holderUse, c.waiterUse); got != c.want {
			t.Errorf("%s: ShouldYield = %v", c.name, got)
		}
	}
}

func TestDecayedUsage(t *testing.T) {
	if got := DecayedUsage(8*time.Second, 2*UsageHalfLife); got != 2*time.Second {
		t.Errorf("two half-lives: %v", got)
	}
	if got := DecayedUsage(time.Second, 0); got != time.Second {
		t.Errorf("no time passed: %v", got)
	}
}
