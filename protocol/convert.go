package protocol

import (
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// The enums of package policy and of the wire share their numbers, so
// conversions are casts; unknown wire values pass through and are refused
// by policy's validation.

// SegmentToWire converts a policy segment to its wire form.
func SegmentToWire(s policy.Segment) *pb.Segment {
	return &pb.Segment{
		Id: s.ID, Kind: pb.SegmentKind(s.Kind), Class: pb.CacheClass(s.Class),
		InvalidateOnEdit: s.InvalidateOnEdit, InvalidateOnTurn: s.InvalidateOnTurn,
		Paths: s.Paths, Text: s.Text, Stable: s.Stable, Tokens: s.Tokens,
		Control: controlToWire(s.Control),
	}
}

// SegmentFromWire converts a wire segment to its policy form.
func SegmentFromWire(s *pb.Segment) policy.Segment {
	return policy.Segment{
		ID: s.GetId(), Kind: policy.SegmentKind(s.GetKind()), Class: policy.CacheClass(s.GetClass()),
		InvalidateOnEdit: s.GetInvalidateOnEdit(), InvalidateOnTurn: s.GetInvalidateOnTurn(),
		Paths: s.GetPaths(), Text: s.GetText(), Stable: s.GetStable(), Tokens: s.GetTokens(),
		Control: controlFromWire(s.GetControl()),
	}
}

func controlToWire(spans []policy.ControlSpan) []*pb.ControlSpan {
	if len(spans) == 0 {
		return nil
	}
	out := make([]*pb.ControlSpan, len(spans))
	for i, c := range spans {
		out[i] = &pb.ControlSpan{Start: uint32(c.Start), End: uint32(c.End)}
	}
	return out
}

// controlFromWire converts control spans; offsets past any text stay
// out of range and are refused by policy's validation.
func controlFromWire(spans []*pb.ControlSpan) []policy.ControlSpan {
	if len(spans) == 0 {
		return nil
	}
	out := make([]policy.ControlSpan, len(spans))
	for i, c := range spans {
		out[i] = policy.ControlSpan{Start: int(c.GetStart()), End: int(c.GetEnd())}
	}
	return out
}

// ManifestToWire converts a manifest to its wire form.
func ManifestToWire(m policy.Manifest) *pb.Manifest {
	w := &pb.Manifest{Template: m.Template, Segments: make([]*pb.Segment, len(m.Segments))}
	for i, s := range m.Segments {
		w.Segments[i] = SegmentToWire(s)
	}
	return w
}

// ManifestFromWire converts a wire manifest; nil gives an empty manifest.
func ManifestFromWire(w *pb.Manifest) policy.Manifest {
	m := policy.Manifest{Template: w.GetTemplate(), Segments: make([]policy.Segment, len(w.GetSegments()))}
	for i, s := range w.GetSegments() {
		m.Segments[i] = SegmentFromWire(s)
	}
	return m
}
