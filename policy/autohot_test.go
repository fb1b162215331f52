package policy

import "testing"

func TestAutoHotBudget(t *testing.T) {
	for _, c := range []struct{ window, memory, block, want int }{
		{512, 1 << 20, 64, 512},  // the window bounds
		{32768, 10000, 64, 9872}, // memory bounds, less two blocks of scratch
		{4096, 100, 64, 0},       // memory leaves nothing
		{0, 1 << 20, 64, 0},      // no trained window known
		{4096, 1 << 20, 0, 4096}, // no blocks
		{131072, 131072 + 128, 64, 131072},
	} {
		if got := AutoHotBudget(c.window, c.memory, c.block); got != c.want {
			t.Errorf("AutoHotBudget(%d, %d, %d) = %d, want %d", c.window, c.memory, c.block, got, c.want)
		}
	}
}
