package protocol

import (
	"errors"
	"testing"
)

func TestNegotiateVersion(t *testing.T) {
	ok := []struct{ lo, hi, want uint32 }{
		{1, 1, 1},
		{1, 9, ProtocolVersion},
		{0, 1, 1},
		{MinProtocolVersion, ProtocolVersion, ProtocolVersion},
	}
	for _, c := range ok {
		got, err := NegotiateVersion(c.lo, c.hi)
		if err != nil || got != c.want {
			t.Fatalf("NegotiateVersion(%d, %d) = %d, %v; want %d", c.lo, c.hi, got, err, c.want)
		}
	}
	bad := []struct{ lo, hi uint32 }{
		{0, 0},
		{2, 1},
		{ProtocolVersion + 1, ProtocolVersion + 5},
		{5, 3},
	}
	for _, c := range bad {
		if _, err := NegotiateVersion(c.lo, c.hi); !errors.Is(err, ErrVersion) {
			t.Fatalf("NegotiateVersion(%d, %d): err = %v, want ErrVersion", c.lo, c.hi, err)
		}
	}
	_, err := NegotiateVersion(7, 9)
	if want := "unsupported protocol version: client speaks 7..9, server speaks 1..1"; err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
}
