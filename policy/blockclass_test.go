package policy

import "testing"

func TestClassifyBlock(t *testing.T) {
	spans := []SegmentSpan{
		{Segment{ID: "sys", Kind: KindSystem}, 0, 10},
		{Segment{ID: "map", Kind: KindRepoMap}, 10, 50},
		{Segment{ID: "core", Kind: KindPinned}, 50, 60},
		{Segment{ID: "diff", Kind: KindDiff, Class: ClassVolatile}, 60, 100},
	}
	for _, tc := range []struct {
		start, end int
		want       BlockClass
	}{
		{60, 100, BlockClass{ClassVolatile, KindDiff, "diff", false}},
		{20, 40, BlockClass{ClassRepoMap, KindRepoMap, "map", false}},
		{40, 70, BlockClass{DefaultClass(KindPinned), KindPinned, "core", true}},
		{100, 164, BlockClass{ClassVolatile, KindTerminal, "", false}}, // generated tokens
		{0, 10, BlockClass{DefaultClass(KindSystem), KindSystem, "sys", false}},
		{5, 15, BlockClass{ClassTaskPinned, KindSystem, "sys", false}},  // the most protective class names it
		{45, 55, BlockClass{ClassTaskPinned, KindPinned, "core", true}}, // past a repo map
		{0, 60, BlockClass{ClassTaskPinned, KindSystem, "sys", true}},   // ties: the first span
		{10, 50, BlockClass{ClassRepoMap, KindRepoMap, "map", false}},   // exactly one span
		{50, 50, BlockClass{ClassVolatile, KindTerminal, "", false}},    // empty
	} {
		if got := ClassifyBlock(spans, tc.start, tc.end); got != tc.want {
			t.Errorf("[%d,%d): got %+v, want %+v", tc.start, tc.end, got, tc.want)
		}
	}
}
