package policy

// SegmentSpan is a manifest segment's place in a session's token stream:
// tokens [Start, End).
type SegmentSpan struct {
	Segment    Segment
	Start, End int
}

// BlockClass is how a sealed block is kept: the class, kind and segment
// it takes from the segments it overlaps, and whether it is pinned.
type BlockClass struct {
	Class     CacheClass
	Kind      SegmentKind
	SegmentID string
	Pinned    bool
}

// ClassifyBlock returns the class of the block of tokens [start, end):
// the most protective effective class (highest EvictionRank) among the
// spans it overlaps, with that span's kind and segment ID (the first such
// span on ties); a block touching a KindPinned segment is pinned. A block
// overlapping no span is volatile terminal output (tokens the session
// generated).
func ClassifyBlock(spans []SegmentSpan, start, end int) BlockClass {
	c := BlockClass{Class: ClassVolatile, Kind: KindTerminal}
	best := -1
	for _, sp := range spans {
		if sp.End <= start || sp.Start >= end {
			continue
		}
		ec := sp.Segment.EffectiveClass()
		if r := ec.EvictionRank(); r > best {
			best, c.Class, c.Kind, c.SegmentID = r, ec, sp.Segment.Kind, sp.Segment.ID
		}
		if sp.Segment.Kind == KindPinned {
			c.Pinned = true
		}
	}
	return c
}
