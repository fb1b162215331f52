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
