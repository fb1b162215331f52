package policy

import (
	"errors"
	"testing"
)

func TestPlausibleWindow(t *testing.T) {
	for _, c := range []struct {
		claimed int64
		window  int
		capped  bool
		bad     bool
	}{
		{512, 512, false, false},
		{131072, 131072, false, false},
		{MaxPlausibleWindow, MaxPlausibleWindow, false, false},
		{MaxPlausibleWindow + 1, MaxPlausibleWindow, true, false},
		{1<<31 - 1, MaxPlausibleWindow, true, false},
		{0, 0, false, true},
		{-1, 0, false, true}, // 2^32−1 read as int32
	} {
		w, capped, err := PlausibleWindow(c.claimed)
		if w != c.window || capped != c.capped || (err != nil) != c.bad || (c.bad && !errors.Is(err, ErrImplausibleWindow)) {
			t.Errorf("PlausibleWindow(%d) = %d, %v, %v; want %d, %v, bad %v", c.claimed, w, capped, err, c.window, c.capped, c.bad)
		}
	}
}
