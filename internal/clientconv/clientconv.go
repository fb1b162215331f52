// Package clientconv converts the daemon's policy manifests to the client's
// own manifest types, for the in-tree callers (benchmarks, replays, tests)
// that build manifests with package policy. Agents build client.Manifest
// directly and never need it.
package clientconv

import (
	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/policy"
)

// Segment converts a policy segment to the client's.
func Segment(s policy.Segment) client.Segment {
	c := client.Segment{
		ID: s.ID, Kind: client.SegmentKind(s.Kind), Class: client.CacheClass(s.Class),
		InvalidateOnEdit: s.InvalidateOnEdit, InvalidateOnTurn: s.InvalidateOnTurn,
		Paths: s.Paths, Text: s.Text, Tokens: s.Tokens, Stable: s.Stable,
	}
	if s.Control != nil {
		c.Control = make([]client.ControlSpan, len(s.Control))
		for i, sp := range s.Control {
			c.Control[i] = client.ControlSpan{Start: sp.Start, End: sp.End}
		}
	}
	return c
}

// Segments converts each of segs.
func Segments(segs []policy.Segment) []client.Segment {
	out := make([]client.Segment, len(segs))
	for i, s := range segs {
		out[i] = Segment(s)
	}
	return out
}

// Manifest converts a policy manifest to the client's.
func Manifest(m policy.Manifest) client.Manifest {
	return client.Manifest{Template: m.Template, Segments: Segments(m.Segments)}
}
