package engine

import "sort"

// PosSet is a set of KV positions stored as sorted, disjoint, non-adjacent
// half-open intervals. Adapters use it to know, without asking the engine,
// which positions of a sequence are occupied, so that every call can be
// validated before it reaches native code.
type PosSet struct {
	iv []span // sorted by lo; iv[i].hi < iv[i+1].lo
	n  int
}

type span struct{ lo, hi int }

// Len is the number of positions in the set.
func (s *PosSet) Len() int { return s.n }

// Max is the largest position plus one, or 0 when empty.
func (s *PosSet) Max() int {
	if len(s.iv) == 0 {
		return 0
	}
	return s.iv[len(s.iv)-1].hi
}

// Min is the smallest position, or 0 when empty.
func (s *PosSet) Min() int {
	if len(s.iv) == 0 {
		return 0
	}
	return s.iv[0].lo
}

// Contains reports whether p is in the set.
func (s *PosSet) Contains(p int) bool {
	i := sort.Search(len(s.iv), func(i int) bool { return s.iv[i].hi > p })
	return i < len(s.iv) && s.iv[i].lo <= p
}

// Count is the number of positions of [lo,hi) in the set.
func (s *PosSet) Count(lo, hi int) int {
	n := 0
	for _, v := range s.iv {
		a, b := max(v.lo, lo), min(v.hi, hi)
		if a < b {
			n += b - a
		}
	}
	return n
}

// Add inserts [lo,hi); positions already present are kept once.
func (s *PosSet) Add(lo, hi int) {
	if lo >= hi {
		return
	}
	i := sort.Search(len(s.iv), func(i int) bool { return s.iv[i].hi >= lo })
	j := i
	for j < len(s.iv) && s.iv[j].lo <= hi {
		lo = min(lo, s.iv[j].lo)
		hi = max(hi, s.iv[j].hi)
		j++
	}
	s.iv = append(s.iv[:i], append([]span{{lo, hi}}, s.iv[j:]...)...)
	s.recount()
}

// Remove deletes [lo,hi) and returns how many positions were removed.
func (s *PosSet) Remove(lo, hi int) int {
	if lo >= hi {
		return 0
	}
	out := s.iv[:0:0]
	removed := 0
	for _, v := range s.iv {
		if v.hi <= lo || v.lo >= hi {
			out = append(out, v)
			continue
		}
		removed += min(v.hi, hi) - max(v.lo, lo)
		if v.lo < lo {
			out = append(out, span{v.lo, lo})
		}
		if v.hi > hi {
			out = append(out, span{hi, v.hi})
		}
	}
	s.iv = out
	s.n -= removed
	return removed
}

// Positions lists every position in ascending order.
func (s *PosSet) Positions() []int {
	out := make([]int, 0, s.n)
	for _, v := range s.iv {
		for p := v.lo; p < v.hi; p++ {
			out = append(out, p)
		}
	}
	return out
}

// Spans returns the set's intervals as [lo,hi) pairs.
func (s *PosSet) Spans() [][2]int {
	out := make([][2]int, len(s.iv))
	for i, v := range s.iv {
		out[i] = [2]int{v.lo, v.hi}
	}
	return out
}

// Reset empties the set.
func (s *PosSet) Reset() { s.iv, s.n = nil, 0 }

func (s *PosSet) recount() {
	n := 0
	for _, v := range s.iv {
		n += v.hi - v.lo
	}
	s.n = n
}
