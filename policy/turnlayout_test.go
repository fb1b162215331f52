package policy

import "testing"

func TestChooseTurnLayout(t *testing.T) {
	base := TurnLayoutInput{CutAt: 100, TapeTokens: 120, MarkAt: 100, MarkTailTokens: 4, MarkTailInEngine: true}
	tests := []struct {
		name string
		edit func(*TurnLayoutInput)
		want bool
	}{
		{"a cut back to the turn's start", func(*TurnLayoutInput) {}, true},
		{"an empty tail at the turn's start", func(in *TurnLayoutInput) { in.MarkTailTokens, in.MarkTailInEngine = 0, false }, true},
		{"no mark", func(in *TurnLayoutInput) { in.MarkAt = -1 }, false},
		{"a cut before the mark", func(in *TurnLayoutInput) { in.CutAt = 99 }, false},
		{"a cut after the mark", func(in *TurnLayoutInput) { in.CutAt = 101 }, false},
		{"nothing added since", func(in *TurnLayoutInput) { in.TapeTokens = 100 }, false},
		{"the tail left the engine", func(in *TurnLayoutInput) { in.MarkTailInEngine = false }, false},
		{"a block was lost", func(in *TurnLayoutInput) { in.LostBlocks = 1 }, false},
		{"the turn's layout fell short of its plan", func(in *TurnLayoutInput) { in.MarkShortfall = true }, false},
	}
	for _, tc := range tests {
		in := base
		tc.edit(&in)
		got := ChooseTurnLayout(in)
		if got.Restore != tc.want || got.Reason == "" {
			t.Errorf("%s: %+v", tc.name, got)
		}
	}
}
