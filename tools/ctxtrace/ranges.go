package ctxtrace

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/client"
)

// Range is an address range [Start, End) of the traced process.
type Range struct {
	Start, End uint64
}

// maxRanges mirrors MAX_RANGES in the C source: the arena's region files
// the page-fault probe can tell apart.
const maxRanges = 32

// RangesFromMetrics converts the arena ranges of ctxd's Metrics reply.
func RangesFromMetrics(rs []client.ArenaRange) []Range {
	out := make([]Range, 0, len(rs))
	for _, r := range rs {
		if r.End > r.Start {
			out = append(out, Range{Start: r.Start, End: r.End})
		}
	}
	return out
}

// regionFile matches the arena's region files (package shm).
var regionFile = regexp.MustCompile(`/region-[0-9]{6}\.shm$`)

// ArenaRangesFromMaps finds the arena's mappings in /proc/PID/maps: the
// region files of package shm, for tracing by pid without the socket.
func ArenaRangesFromMaps(pid int) ([]Range, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "maps"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseArenaMaps(f)
}

// parseArenaMaps reads the maps format: "start-end perms offset dev inode
// path"; adjacent mappings of one file merge.
func parseArenaMaps(r io.Reader) ([]Range, error) {
	var out []Range
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !regionFile.MatchString(fields[5]) {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("maps line %q: no address range", sc.Text())
		}
		s, err1 := strconv.ParseUint(lo, 16, 64)
		e, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || e <= s {
			return nil, fmt.Errorf("maps line %q: bad address range", sc.Text())
		}
		out = append(out, Range{Start: s, End: e})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 && merged[n-1].End == r.Start {
			merged[n-1].End = r.End
			continue
		}
		merged = append(merged, r)
	}
	return merged, nil
}
