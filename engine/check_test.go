package engine

import (
	"errors"
	"testing"
)

func TestKVArgumentChecks(t *testing.T) {
	var s PosSet
	s.Add(0, 10)
	blob := []byte{1}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"negative start", CheckPositions(-1, 4), ErrInvalidArgument},
		{"reversed", CheckPositions(5, 4), ErrInvalidArgument},
		{"beyond MaxPos", CheckPositions(0, MaxPos+1), ErrInvalidArgument},
		{"in range", CheckPositions(0, MaxPos), nil},
		{"extract resident", s.CheckExtract(2, 8), nil},
		{"extract empty", s.CheckExtract(3, 3), ErrInvalidArgument},
		{"extract a hole", s.CheckExtract(8, 12), ErrInvalidArgument},
		{"insert at free positions", s.CheckInsert(Range{Pos0: 10, Count: 4, Blob: blob}, 20, 16, true), nil},
		{"insert without bytes", s.CheckInsert(Range{Pos0: 10, Count: 4}, 20, 16, true), ErrInvalidArgument},
		{"insert over tokens", s.CheckInsert(Range{Pos0: 10, Count: 4, Blob: blob}, 8, 16, true), ErrInvalidArgument},
		{"insert moved without shifts", s.CheckInsert(Range{Pos0: 10, Count: 4, Blob: blob}, 20, 16, false), ErrNoShift},
		{"insert in place without shifts", s.CheckInsert(Range{Pos0: 10, Count: 4, Blob: blob}, 10, 16, false), nil},
		{"insert beyond the cells", s.CheckInsert(Range{Pos0: 10, Count: 7, Blob: blob}, 20, 16, true), ErrContextFull},
	}
	for _, c := range cases {
		if (c.want == nil) != (c.err == nil) || (c.want != nil && !errors.Is(c.err, c.want)) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
	}
}
