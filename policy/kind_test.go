package policy

import (
	"errors"
	"testing"
)

func TestSegmentKindNames(t *testing.T) {
	want := []string{"unspecified", "system", "tools", "repo_rules", "repo_map", "pinned", "diff", "terminal", "user_turn"}
	for i, name := range want {
		k := SegmentKind(i)
		if k.String() != name {
			t.Errorf("SegmentKind(%d).String() = %q, want %q", i, k.String(), name)
		}
		got, err := ParseSegmentKind(name)
		if i == 0 {
			if !errors.Is(err, ErrUnknownName) || k.Valid() {
				t.Errorf("unspecified: parse err %v, valid %v", err, k.Valid())
			}
			continue
		}
		if err != nil || got != k || !k.Valid() {
			t.Errorf("ParseSegmentKind(%q) = %v, %v", name, got, err)
		}
	}
	// The numbers equal the protobuf enum.
	if KindSystem != 1 || KindTools != 2 || KindRepoRules != 3 || KindRepoMap != 4 || KindPinned != 5 ||
		KindDiff != 6 || KindTerminal != 7 || KindUserTurn != 8 {
		t.Error("segment kind numbers drifted from the protobuf enum")
	}
	if got, err := ParseSegmentKind(" Repo_Map "); err != nil || got != KindRepoMap {
		t.Errorf("ParseSegmentKind case/space: %v, %v", got, err)
	}
	for _, bad := range []string{"", "repo-map", "user"} {
		if _, err := ParseSegmentKind(bad); !errors.Is(err, ErrUnknownName) {
			t.Errorf("ParseSegmentKind(%q) err = %v", bad, err)
		}
	}
	for _, k := range []SegmentKind{-1, 9} {
		if k.Valid() || k.String() == "" {
			t.Errorf("SegmentKind(%d): valid %v, string %q", k, k.Valid(), k.String())
		}
	}
}

func TestCacheClassNames(t *testing.T) {
	want := []string{"unspecified", "task_pinned", "repo_map", "volatile"}
	for i, name := range want {
		c := CacheClass(i)
		if c.String() != name || !c.Valid() {
			t.Errorf("CacheClass(%d) = %q valid %v, want %q", i, c.String(), c.Valid(), name)
		}
		got, err := ParseCacheClass(name)
		if i == 0 {
			if !errors.Is(err, ErrUnknownName) {
				t.Errorf("ParseCacheClass(unspecified) err = %v", err)
			}
			continue
		}
		if err != nil || got != c {
			t.Errorf("ParseCacheClass(%q) = %v, %v", name, got, err)
		}
	}
	if ClassTaskPinned != 1 || ClassRepoMap != 2 || ClassVolatile != 3 {
		t.Error("cache class numbers drifted from the protobuf enum")
	}
	if _, err := ParseCacheClass("pinned"); !errors.Is(err, ErrUnknownName) {
		t.Errorf("ParseCacheClass(pinned) err = %v", err)
	}
	for _, c := range []CacheClass{-1, 4} {
		if c.Valid() || c.EvictionRank() != -1 {
			t.Errorf("CacheClass(%d): valid %v rank %d", c, c.Valid(), c.EvictionRank())
		}
	}
}

func TestEvictionRank(t *testing.T) {
	if !(ClassVolatile.EvictionRank() < ClassRepoMap.EvictionRank() && ClassRepoMap.EvictionRank() < ClassTaskPinned.EvictionRank()) {
		t.Error("eviction order must be volatile, repo_map, task_pinned")
	}
	if ClassVolatile.EvictionRank() != 0 || ClassRepoMap.EvictionRank() != 1 || ClassTaskPinned.EvictionRank() != 2 || ClassUnspecified.EvictionRank() != -1 {
		t.Error("eviction ranks wrong")
	}
}

func TestDefaultAndEffectiveClass(t *testing.T) {
	want := map[SegmentKind]CacheClass{
		KindUnspecified: ClassUnspecified,
		KindSystem:      ClassTaskPinned, KindTools: ClassTaskPinned, KindRepoRules: ClassTaskPinned, KindPinned: ClassTaskPinned,
		KindRepoMap: ClassRepoMap,
		KindDiff:    ClassVolatile, KindTerminal: ClassVolatile, KindUserTurn: ClassVolatile,
		SegmentKind(42): ClassUnspecified,
	}
	for k, c := range want {
		if got := DefaultClass(k); got != c {
			t.Errorf("DefaultClass(%v) = %v, want %v", k, got, c)
		}
		if got := (Segment{Kind: k}).EffectiveClass(); got != c {
			t.Errorf("EffectiveClass(%v) = %v, want %v", k, got, c)
		}
	}
	if got := (Segment{Kind: KindSystem, Class: ClassVolatile}).EffectiveClass(); got != ClassVolatile {
		t.Errorf("explicit class overridden: %v", got)
	}
}
