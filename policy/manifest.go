package policy

import (
	"fmt"
	"unicode/utf8"
)

// Manifest limits checked by Validate.
const (
	// MaxSegments is the most segments a manifest may hold.
	MaxSegments = 4096
	// MaxManifestBytes is the most text, summed over all segments, a
	// manifest may hold.
	MaxManifestBytes = 64 << 20
)

// Segment is one ordered piece of a prompt.
type Segment struct {
	// ID names the segment; non-empty IDs are unique within a manifest.
	ID   string
	Kind SegmentKind
	// Class is the eviction class; ClassUnspecified means DefaultClass(Kind).
	Class CacheClass
	// InvalidateOnEdit drops the segment when a file in Paths is edited.
	InvalidateOnEdit bool
	// InvalidateOnTurn drops the segment at every new turn.
	InvalidateOnTurn bool
	// Paths are the files whose edit invalidates the segment.
	Paths []string
	// Text is the segment's content, valid UTF-8.
	Text string
	// Tokens, when non-empty, are the segment's token ids, used instead of
	// tokenizing Text (evaluations; clients that tokenize themselves).
	Tokens []int32
	// Stable marks the segment part of the reusable prefix. Stable segments
	// come first in a manifest.
	Stable bool
	// Control are the byte ranges of Text that are control-token texts
	// (see ControlSpan), in order and disjoint; nil means all of Text is
	// tokenized as text.
	Control []ControlSpan
}

// Manifest is a prompt as ordered segments: a stable prefix, whose KV is
// reused across requests, followed by a volatile suffix.
type Manifest struct {
	Segments []Segment
	// Template is the prompt template name; it is part of the CompatKey.
	Template string
}

// EffectiveClass returns s.Class, or DefaultClass(s.Kind) when s.Class is
// ClassUnspecified.
func (s Segment) EffectiveClass() CacheClass {
	if s.Class == ClassUnspecified {
		return DefaultClass(s.Kind)
	}
	return s.Class
}

// Validate checks s on its own (everything Manifest.Validate checks except
// ID uniqueness, ordering and the manifest-wide limits, with s.Text limited
// to MaxManifestBytes). Errors wrap ErrInvalidManifest.
func (s Segment) Validate() error {
	if p := s.problem(); p != "" {
		return fmt.Errorf("%w: segment%s: %s", ErrInvalidManifest, idLabel(s.ID), p)
	}
	if len(s.Text) > MaxManifestBytes {
		return fmt.Errorf("%w: segment%s: text of %d bytes exceeds MaxManifestBytes (%d)",
			ErrInvalidManifest, idLabel(s.ID), len(s.Text), MaxManifestBytes)
	}
	return nil
}

// problem describes the first rule s breaks on its own, or returns "".
func (s *Segment) problem() string {
	switch {
	case !s.Kind.Valid():
		return fmt.Sprintf("unknown kind %s", s.Kind)
	case !s.Class.Valid():
		return fmt.Sprintf("unknown class %s", s.Class)
	case !utf8.ValidString(s.ID):
		return "id is not valid UTF-8"
	case s.InvalidateOnEdit && len(s.Paths) == 0:
		return "invalidate_on_edit is set but paths is empty"
	case !utf8.ValidString(s.Text):
		return "text is not valid UTF-8"
	}
	if p := controlProblem(s.Control, s.Text, len(s.Tokens)); p != "" {
		return p
	}
	for j, t := range s.Tokens {
		if t < 0 {
			return fmt.Sprintf("tokens[%d] is negative (%d)", j, t)
		}
	}
	for j, p := range s.Paths {
		if p == "" {
			return fmt.Sprintf("paths[%d] is empty", j)
		}
		if !utf8.ValidString(p) {
			return fmt.Sprintf("paths[%d] is not valid UTF-8", j)
		}
	}
	return ""
}

// Validate checks m and returns the first problem found, as an error
// wrapping ErrInvalidManifest that names the segment index and ID. The rules:
// at least one and at most MaxSegments segments; at most MaxManifestBytes of
// text in all; each segment has a defined kind (not KindUnspecified) and a
// defined class (ClassUnspecified allowed); non-empty IDs are unique; stable
// segments form a prefix (none follows a non-stable one); InvalidateOnEdit
// needs Paths; paths are non-empty; the template, IDs, paths and text are
// valid UTF-8; control spans are ordered, disjoint, within the text, on rune
// boundaries, and not set together with tokens.
func (m *Manifest) Validate() error {
	if m == nil {
		return fmt.Errorf("%w: nil manifest", ErrInvalidManifest)
	}
	n := len(m.Segments)
	switch {
	case n == 0:
		return fmt.Errorf("%w: no segments", ErrInvalidManifest)
	case n > MaxSegments:
		return fmt.Errorf("%w: %d segments exceed MaxSegments (%d)", ErrInvalidManifest, n, MaxSegments)
	case !utf8.ValidString(m.Template):
		return fmt.Errorf("%w: template is not valid UTF-8", ErrInvalidManifest)
	}
	seen := make(map[string]int, n)
	firstVolatile := -1
	total := 0
	for i := range m.Segments {
		s := &m.Segments[i]
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: segment %d%s: %s", ErrInvalidManifest, i, idLabel(s.ID), fmt.Sprintf(format, args...))
		}
		if p := s.problem(); p != "" {
			return bad("%s", p)
		}
		if s.ID != "" {
			if j, dup := seen[s.ID]; dup {
				return bad("duplicate id (also segment %d)", j)
			}
			seen[s.ID] = i
		}
		if !s.Stable && firstVolatile < 0 {
			firstVolatile = i
		}
		if s.Stable && firstVolatile >= 0 {
			return bad("stable segment after non-stable segment %d%s; stable segments must form a prefix",
				firstVolatile, idLabel(m.Segments[firstVolatile].ID))
		}
		total += len(s.Text)
		if total > MaxManifestBytes {
			return bad("text brings the manifest to %d bytes, over MaxManifestBytes (%d)", total, MaxManifestBytes)
		}
	}
	return nil
}

// idLabel renders an ID for messages: ` (id "x")`, or "" when empty.
func idLabel(id string) string {
	if id == "" {
		return ""
	}
	return fmt.Sprintf(" (id %q)", id)
}

// Boundary returns the index of the first non-stable segment, or
// len(m.Segments) when all are stable: the stable/volatile boundary. A nil
// manifest gives 0. On a valid manifest, segments before the boundary are
// exactly the stable ones.
func (m *Manifest) Boundary() int {
	if m == nil {
		return 0
	}
	for i := range m.Segments {
		if !m.Segments[i].Stable {
			return i
		}
	}
	return len(m.Segments)
}

// StablePrefix returns the segments before Boundary, sharing m's storage.
func (m *Manifest) StablePrefix() []Segment {
	if m == nil {
		return nil
	}
	return m.Segments[:m.Boundary():m.Boundary()]
}

// Suffix returns the segments from Boundary on, sharing m's storage.
func (m *Manifest) Suffix() []Segment {
	if m == nil {
		return nil
	}
	return m.Segments[m.Boundary():]
}
