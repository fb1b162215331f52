package policy

import (
	"fmt"
	"strings"
)

// SegmentKind says what a manifest segment holds. The values equal the
// protobuf enum ctxd.SegmentKind, so conversions are plain casts.
type SegmentKind int32

// Segment kinds.
const (
	KindUnspecified SegmentKind = 0 // not a valid kind in a manifest
	KindSystem      SegmentKind = 1 // system prompt
	KindTools       SegmentKind = 2 // tool definitions
	KindRepoRules   SegmentKind = 3 // repository rules (AGENTS.md and the like)
	KindRepoMap     SegmentKind = 4 // repository map
	KindPinned      SegmentKind = 5 // files pinned for the task
	KindDiff        SegmentKind = 6 // working-tree diff
	KindTerminal    SegmentKind = 7 // terminal output
	KindUserTurn    SegmentKind = 8 // the user's turn
)

var segmentKindNames = [...]string{
	KindUnspecified: "unspecified",
	KindSystem:      "system",
	KindTools:       "tools",
	KindRepoRules:   "repo_rules",
	KindRepoMap:     "repo_map",
	KindPinned:      "pinned",
	KindDiff:        "diff",
	KindTerminal:    "terminal",
	KindUserTurn:    "user_turn",
}

// String returns the kind's name, e.g. "repo_rules"; KindUnspecified gives
// "unspecified" and an undefined value "SegmentKind(n)".
func (k SegmentKind) String() string {
	if k >= 0 && int(k) < len(segmentKindNames) {
		return segmentKindNames[k]
	}
	return fmt.Sprintf("SegmentKind(%d)", int32(k))
}

// Valid reports whether k is a defined kind other than KindUnspecified.
func (k SegmentKind) Valid() bool { return k > KindUnspecified && k <= KindUserTurn }

// ParseSegmentKind parses a name returned by String ("system", "tools",
// "repo_rules", "repo_map", "pinned", "diff", "terminal", "user_turn"),
// ignoring case and surrounding space. Other names, "unspecified" included,
// give an error wrapping ErrUnknownName.
func ParseSegmentKind(s string) (SegmentKind, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for k := KindSystem; k <= KindUserTurn; k++ {
		if segmentKindNames[k] == name {
			return k, nil
		}
	}
	return KindUnspecified, fmt.Errorf("%w: segment kind %q", ErrUnknownName, s)
}

// CacheClass says how eagerly a segment's KV may be evicted. The values equal
// the protobuf enum ctxd.CacheClass, so conversions are plain casts.
type CacheClass int32

// Cache classes.
const (
	ClassUnspecified CacheClass = 0 // use DefaultClass of the segment's kind
	ClassTaskPinned  CacheClass = 1 // kept for the whole task; evicted last
	ClassRepoMap     CacheClass = 2 // kept while the repository map holds
	ClassVolatile    CacheClass = 3 // changes often; evicted first
)

var cacheClassNames = [...]string{
	ClassUnspecified: "unspecified",
	ClassTaskPinned:  "task_pinned",
	ClassRepoMap:     "repo_map",
	ClassVolatile:    "volatile",
}

// String returns the class's name, e.g. "task_pinned"; ClassUnspecified
// gives "unspecified" and an undefined value "CacheClass(n)".
func (c CacheClass) String() string {
	if c >= 0 && int(c) < len(cacheClassNames) {
		return cacheClassNames[c]
	}
	return fmt.Sprintf("CacheClass(%d)", int32(c))
}

// Valid reports whether c is a defined class, ClassUnspecified included.
func (c CacheClass) Valid() bool { return c >= ClassUnspecified && c <= ClassVolatile }

// ParseCacheClass parses "task_pinned", "repo_map" or "volatile", ignoring
// case and surrounding space. Other names, "unspecified" included, give an
// error wrapping ErrUnknownName.
func ParseCacheClass(s string) (CacheClass, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for c := ClassTaskPinned; c <= ClassVolatile; c++ {
		if cacheClassNames[c] == name {
			return c, nil
		}
	}
	return ClassUnspecified, fmt.Errorf("%w: cache class %q", ErrUnknownName, s)
}

// EvictionRank orders classes for eviction: lower ranks are evicted first.
// Volatile is 0, repo_map 1 and task_pinned 2. ClassUnspecified and
// undefined values give -1; resolve them with Segment.EffectiveClass first.
func (c CacheClass) EvictionRank() int {
	switch c {
	case ClassVolatile:
		return 0
	case ClassRepoMap:
		return 1
	case ClassTaskPinned:
		return 2
	}
	return -1
}

// DefaultClass returns the cache class a segment of kind k gets when it names
// none: task_pinned for system, tools, repo_rules and pinned; repo_map for
// repo_map; volatile for diff, terminal and user_turn; ClassUnspecified for
// an invalid kind.
func DefaultClass(k SegmentKind) CacheClass {
	switch k {
	case KindSystem, KindTools, KindRepoRules, KindPinned:
		return ClassTaskPinned
	case KindRepoMap:
		return ClassRepoMap
	case KindDiff, KindTerminal, KindUserTurn:
		return ClassVolatile
	}
	return ClassUnspecified
}
