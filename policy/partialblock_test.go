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
