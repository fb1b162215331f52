package policy

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestLatencyHotBudget(t *testing.T) {
	c := PrefillCost{BaseSeconds: 1e-3, PerContextSeconds: 1e-7}
	tests := []struct {
		name          string
		cost          PrefillCost
		latency       float64
		suffix, max   int
		wantNear      int // expected within ±1
		wantMaxTokens bool
	}{
		// 100 × (1e-3 + 1e-7 h) ≤ 1 ⇔ h ≤ 90000.
		{"attention bound", c, 1, 100, 1 << 20, 90000, false},
		{"memory bound", c, 1, 100, 50000, 50000, true},
		{"exactly the suffix", c, 100 * (1e-3 + 1e-7*100), 100, 1 << 20, 100, false},
		{"no attention cost", PrefillCost{BaseSeconds: 1e-3}, 1, 100, 1 << 20, 1 << 20, true},
		{"no suffix", c, 1e-9, 0, 4096, 4096, true},
		{"infinite latency", c, math.Inf(1), 10, 4096, 4096, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := LatencyHotBudget(tc.cost, tc.latency, tc.suffix, tc.max)
			if err != nil {
				t.Fatalf("LatencyHotBudget: %v", err)
			}
			if h < tc.wantNear-1 || h > tc.wantNear+1 || tc.wantMaxTokens && h != tc.max {
				t.Errorf("h = %d, want %d", h, tc.wantNear)
			}
			if h < tc.suffix || h > tc.max || tc.cost.TurnSeconds(tc.suffix, h) > tc.latency {
				t.Errorf("h = %d outside [%d, %d] or too slow (%g s > %g s)", h, tc.suffix, tc.max, tc.cost.TurnSeconds(tc.suffix, h), tc.latency)
			}
			if h < tc.max && tc.cost.TurnSeconds(tc.suffix, h+1) <= tc.latency {
				t.Errorf("h = %d is not the largest: h+1 also fits", h)
			}
		})
	}
}

func TestLatencyHotBudgetErrors(t *testing.T) {
	c := PrefillCost{BaseSeconds: 1e-3, PerContextSeconds: 1e-7}
	if _, err := LatencyHotBudget(c, 0.05, 100, 1<<20); !errors.Is(err, ErrHotBudget) || !strings.Contains(err.Error(), "100 tokens") {
		t.Errorf("suffix alone too slow: err = %v", err)
	}
	if _, err := LatencyHotBudget(c, 1, 100, 99); !errors.Is(err, ErrHotBudget) {
		t.Errorf("max below suffix: err = %v", err)
	}
	for name, f := range map[string]func() (int, error){
		"negative base":    func() (int, error) { return LatencyHotBudget(PrefillCost{BaseSeconds: -1}, 1, 1, 10) },
		"NaN per context":  func() (int, error) { return LatencyHotBudget(PrefillCost{PerContextSeconds: math.NaN()}, 1, 1, 10) },
		"infinite base":    func() (int, error) { return LatencyHotBudget(PrefillCost{BaseSeconds: math.Inf(1)}, 1, 1, 10) },
		"zero latency":     func() (int, error) { return LatencyHotBudget(c, 0, 1, 10) },
		"NaN latency":      func() (int, error) { return LatencyHotBudget(c, math.NaN(), 1, 10) },
		"negative suffix":  func() (int, error) { return LatencyHotBudget(c, 1, -1, 10) },
		"negative maximum": func() (int, error) { return LatencyHotBudget(c, 1, 0, -1) },
	} {
		if _, err := f(); !errors.Is(err, ErrInvalidHotSet) {
			t.Errorf("%s: err = %v, want ErrInvalidHotSet", name, err)
		}
	}
}

func TestFitPrefillCost(t *testing.T) {
	want := PrefillCost{BaseSeconds: 2e-3, PerContextSeconds: 5e-8}
	tps := func(ctx int) float64 { return 1 / (want.BaseSeconds + want.PerContextSeconds*float64(ctx)) }
	got, err := FitPrefillCost(1000, tps(1000), 9000, tps(9000))
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.BaseSeconds-want.BaseSeconds) > 1e-12 || math.Abs(got.PerContextSeconds-want.PerContextSeconds) > 1e-15 {
		t.Errorf("FitPrefillCost = %+v, want %+v", got, want)
	}
	// Noise: faster at the longer context gives no slope, the slower base.
	if got, err := FitPrefillCost(1000, 400, 8000, 500); err != nil || got != (PrefillCost{BaseSeconds: 1.0 / 400}) {
		t.Errorf("negative slope: %+v, %v", got, err)
	}
	// A steep slope would give a negative intercept: clamp to 0.
	if got, err := FitPrefillCost(1000, 1000, 2000, 100); err != nil || got.BaseSeconds != 0 || got.PerContextSeconds <= 0 {
		t.Errorf("negative intercept: %+v, %v", got, err)
	}
	for _, bad := range [][4]float64{{1000, 1, 1000, 1}, {-1, 1, 10, 1}, {0, 0, 10, 1}, {0, 1, 10, math.Inf(1)}, {0, math.NaN(), 10, 1}} {
		if _, err := FitPrefillCost(int(bad[0]), bad[1], int(bad[2]), bad[3]); !errors.Is(err, ErrInvalidHotSet) {
			t.Errorf("FitPrefillCost%v: err = %v", bad, err)
		}
	}
}
