package engine

import "fmt"

// MaxPos bounds positions well inside llama_pos (int32); every engine
// refuses positions at or beyond it.
const MaxPos = 1 << 30

// The checks below are the argument contracts of Context's KV methods,
// written once: each engine calls them before touching its KV (for
// engine/llama, before any llama.cpp call, which would abort on bad
// arguments). Failures wrap ErrInvalidArgument, ErrNoShift or
// ErrContextFull.

// CheckPositions validates the position range [p0,p1).
func CheckPositions(p0, p1 int) error {
	if p0 < 0 || p1 < p0 || p1 > MaxPos {
		return fmt.Errorf("%w: position range [%d,%d)", ErrInvalidArgument, p0, p1)
	}
	return nil
}

// CheckExtract validates ExtractRange(p0, p1) against the occupied
// positions s: a non-empty range every position of which holds a token.
func (s *PosSet) CheckExtract(p0, p1 int) error {
	if err := CheckPositions(p0, p1); err != nil {
		return err
	}
	if p0 == p1 || s.Count(p0, p1) != p1-p0 {
		return fmt.Errorf("%w: [%d,%d) is not a fully resident range", ErrInvalidArgument, p0, p1)
	}
	return nil
}

// CheckInsert validates InsertRange(r, at) against the occupied positions
// s of a context of cells cells: a well-formed range landing on free
// positions, moved only where positions can shift, fitting the cells.
func (s *PosSet) CheckInsert(r Range, at, cells int, canShift bool) error {
	if err := CheckPositions(at, at+r.Count); err != nil {
		return err
	}
	if r.Count <= 0 || len(r.Blob) == 0 || r.Pos0 < 0 {
		return fmt.Errorf("%w: empty or malformed range", ErrInvalidArgument)
	}
	if at != r.Pos0 && !canShift {
		return ErrNoShift
	}
	if s.Count(at, at+r.Count) != 0 {
		return fmt.Errorf("%w: positions [%d,%d) already hold tokens", ErrInvalidArgument, at, at+r.Count)
	}
	if s.Len()+r.Count > cells {
		return fmt.Errorf("%w: %d resident + %d inserted > %d cells", ErrContextFull, s.Len(), r.Count, cells)
	}
	return nil
}
