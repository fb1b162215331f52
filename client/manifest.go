package client

import "github.com/ctxd/ctxd/policy"

// Segment is one ordered piece of a prompt. It mirrors the daemon's
// manifest segment (PROTOCOL.md, "Manifests"); the daemon validates it and
// answers ErrInvalidManifest naming the segment.
type Segment struct {
	// ID names the segment; non-empty IDs are unique within a manifest.
	ID   string
	Kind SegmentKind
	// Class is the eviction class; ClassUnspecified lets the daemon pick
	// the default class of Kind.
	Class CacheClass
	// InvalidateOnEdit drops the segment when ReportEdit names a file in
	// Paths.
	InvalidateOnEdit bool
	// InvalidateOnTurn drops the segment at every new turn.
	InvalidateOnTurn bool
	// Paths are the files whose edit invalidates the segment.
	Paths []string
	// Text is the segment's content, valid UTF-8.
	Text string
	// Tokens, when non-empty, are the segment's token ids, used instead of
	// tokenizing Text (clients that tokenize themselves).
	Tokens []int32
	// Stable marks the segment part of the reusable prefix; stable
	// segments come first in a manifest.
	Stable bool
	// Control are the byte ranges of Text that are control-token texts, in
	// order and disjoint; nil tokenizes all of Text as text.
	Control []ControlSpan
}

// Manifest is a prompt as ordered segments: a stable prefix, whose KV the
// daemon reuses across turns, followed by a volatile suffix.
type Manifest struct {
	Segments []Segment
	// Template is the prompt template name; it is part of the
	// compatibility key of snapshots.
	Template string
}

// ControlSpan is the byte range [Start, End) of a segment's Text that is
// the text of one control token (such as "<|im_start|>").
type ControlSpan struct {
	Start, End int
}

// SegmentKind says what a segment holds; it picks the default CacheClass.
type SegmentKind int32

// Segment kinds; the values are the wire values.
const (
	KindUnspecified SegmentKind = 0 // not valid in a manifest
	KindSystem      SegmentKind = 1 // system prompt
	KindTools       SegmentKind = 2 // tool definitions
	KindRepoRules   SegmentKind = 3 // repository rules (AGENTS.md and the like)
	KindRepoMap     SegmentKind = 4 // repository map
	KindPinned      SegmentKind = 5 // files pinned for the task
	KindDiff        SegmentKind = 6 // working-tree diff
	KindTerminal    SegmentKind = 7 // terminal output
	KindUserTurn    SegmentKind = 8 // the user's turn
)

// String returns the kind's name, e.g. "repo_rules".
func (k SegmentKind) String() string { return policy.SegmentKind(k).String() }

// CacheClass says how eagerly a segment's KV may be evicted.
type CacheClass int32

// Cache classes; the values are the wire values.
const (
	ClassUnspecified CacheClass = 0 // the default class of the segment's kind
	ClassTaskPinned  CacheClass = 1 // kept for the whole task; evicted last
	ClassRepoMap     CacheClass = 2 // kept while the repository map holds
	ClassVolatile    CacheClass = 3 // changes often; evicted first
)

// String returns the class's name, e.g. "task_pinned".
func (c CacheClass) String() string { return policy.CacheClass(c).String() }

// policySegment converts s to the daemon's form.
func (s Segment) policySegment() policy.Segment {
	p := policy.Segment{
		ID: s.ID, Kind: policy.SegmentKind(s.Kind), Class: policy.CacheClass(s.Class),
		InvalidateOnEdit: s.InvalidateOnEdit, InvalidateOnTurn: s.InvalidateOnTurn,
		Paths: s.Paths, Text: s.Text, Tokens: s.Tokens, Stable: s.Stable,
	}
	if s.Control != nil {
		p.Control = make([]policy.ControlSpan, len(s.Control))
		for i, c := range s.Control {
			p.Control[i] = policy.ControlSpan{Start: c.Start, End: c.End}
		}
	}
	return p
}

// policyManifest converts m to the daemon's form.
func (m Manifest) policyManifest() policy.Manifest {
	p := policy.Manifest{Template: m.Template, Segments: make([]policy.Segment, len(m.Segments))}
	for i, s := range m.Segments {
		p.Segments[i] = s.policySegment()
	}
	return p
}
