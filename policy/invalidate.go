package policy

import "path"

// EditInvalidates reports whether editing editedPath invalidates s: s has
// InvalidateOnEdit set and one of its Paths equals editedPath once both are
// cleaned with path.Clean (slash-separated, so results do not depend on the
// host OS). An empty editedPath invalidates nothing.
func EditInvalidates(s Segment, editedPath string) bool {
	if !s.InvalidateOnEdit || editedPath == "" {
		return false
	}
	want := path.Clean(editedPath)
	for _, p := range s.Paths {
		if p != "" && path.Clean(p) == want {
			return true
		}
	}
	return false
}

// TurnInvalidates reports whether a new turn invalidates s.
func TurnInvalidates(s Segment) bool { return s.InvalidateOnTurn }
