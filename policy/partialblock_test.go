package policy

import "testing"

func TestPartialBlockWorthCopying(t *testing.T) {
	tests := []struct {
		name         string
		want, block  int
		perTok, copy float64
		copyIt       bool
	}{
		{"nothing wanted", 0, 64, 0.01, 1e-6, false},
		{"more wanted than the block holds", 65, 64, 0.01, 1e-6, false},
		{"a few tokens, a cheap copy", 3, 64, 0.01, 1e-6, true},            // 30 ms of prefill against 64 µs
		{"one token, an expensive copy", 1, 64, 1e-4, 1e-5, false},         // 0.1 ms against 0.64 ms
		{"most of the block, an expensive copy", 60, 64, 1e-4, 1e-5, true}, // 6 ms against 0.64 ms
		{"no cost model", 1, 64, 0, 1e-3, true},
		{"no copy estimate yet", 1, 64, 1e-4, 0, true},
		{"the whole block", 64, 64, 1e-4, 1e-4 - 1e-9, true},
		{"the whole block, copying as dear as prefill", 64, 64, 1e-4, 1e-4, false},
	}
	for _, tc := range tests {
		if got := PartialBlockWorthCopying(tc.want, tc.block, tc.perTok, tc.copy); got != tc.copyIt {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.copyIt)
		}
	}
}

func TestHotExactPrefix(t *testing.T) {
	tests := []struct {
		name                            string
		end, total, limit, batch, chunk int
		take, stop                      int
	}{
		{"the prompt fits the hot set", 201, 250, 256, 512, 64, 201, 201},
		{"the prompt fits exactly", 256, 256, 256, 512, 64, 256, 256},
		// Batches larger than the hot set: a cold prefill fills it in one
		// batch, then evicts at 256.
		{"longer than the hot set", 196, 3000, 256, 512, 64, 196, 256},
		{"BOS alone", 1, 3000, 256, 512, 64, 1, 256},
		{"past the first eviction", 256, 3000, 256, 512, 64, 256, 256},
		// Batches of 100: a cold prefill stands at 0, 100, 200 and evicts
		// at 200 (56 tokens of room left, less than a chunk).
		{"small batches, between two", 150, 3000, 256, 100, 64, 150, 200},
		{"small batches, on one", 100, 3000, 256, 100, 64, 100, 100},
		{"small batches, past the first eviction", 250, 3000, 256, 100, 64, 200, 200},
		{"no sizes", 196, 3000, 256, 0, 0, 196, 196},
		{"nothing to copy", 0, 3000, 256, 512, 64, 0, 0},
	}
	for _, tc := range tests {
		if take, stop := HotExactPrefix(tc.end, tc.total, tc.limit, tc.batch, tc.chunk); take != tc.take || stop != tc.stop {
			t.Errorf("%s: got %d, %d, want %d, %d", tc.name, take, stop, tc.take, tc.stop)
		}
	}
}
