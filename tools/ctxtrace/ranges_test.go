package ctxtrace

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestParseArenaMaps(t *testing.T) {
	maps := `00400000-00452000 r-xp 00000000 fe:01 123 /usr/bin/ctxd
7f0000000000-7f0000100000 rw-s 00000000 fe:01 555 /state/ctxd/shm/region-000000.shm
7f0000100000-7f0000200000 rw-s 00100000 fe:01 555 /state/ctxd/shm/region-000000.shm
7f0000300000-7f0000400000 rw-s 00000000 fe:01 556 /state/ctxd/shm/region-000001.shm
7f0000500000-7f0000501000 rw-s 00000000 fe:01 557 /state/ctxd/shm/arena.shm
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
`
	got, err := parseArenaMaps(strings.NewReader(maps))
	if err != nil {
		t.Fatal(err)
	}
	want := []Range{{0x7f0000000000, 0x7f0000200000}, {0x7f0000300000, 0x7f0000400000}}
	if !slices.Equal(got, want) {
		t.Fatalf("ranges %x, want %x (region files only, adjacent ones merged)", got, want)
	}
	if _, err := parseArenaMaps(strings.NewReader("zz-yy rw-s 0 0:0 1 /x/region-000000.shm\n")); err == nil {
		t.Fatal("a bad address range must be an error")
	}
	// This process maps no arena: no ranges, no error.
	rs, err := ArenaRangesFromMaps(os.Getpid())
	if err != nil || len(rs) != 0 {
		t.Fatalf("own maps: %v %v", rs, err)
	}
}
