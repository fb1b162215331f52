package protocol

import (
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/protocol/ctxdpb"
)

// marshalAppend appends m's encoding to b. A StreamEvent holding a
// TokenEvent — one per streamed token — is encoded here, byte for byte
// as proto.Marshal encodes it (TestAppendTokenEventMatchesProto), without
// the protobuf runtime's reflective oneof sizing (≈ 1 µs a token, on the
// decoding goroutine's path); everything else goes to proto.
func marshalAppend(b []byte, m proto.Message) ([]byte, error) {
	if ev, ok := m.(*ctxdpb.StreamEvent); ok {
		if t, ok := ev.Body.(*ctxdpb.StreamEvent_Token); ok && t.Token != nil && utf8.ValidString(t.Token.Piece) {
			return appendTokenEvent(b, t.Token), nil
		}
	}
	return marshalOptions.MarshalAppend(b, m)
}

// appendTokenEvent appends StreamEvent{token: t}: field 1 holding t's
// non-zero fields in field order (proto3: zero values are not sent,
// logits packed).
func appendTokenEvent(b []byte, t *ctxdpb.TokenEvent) []byte {
	n := 0
	if t.Token != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(t.Token)))
	}
	if t.Piece != "" {
		n += 1 + protowire.SizeBytes(len(t.Piece))
	}
	if t.ElapsedUs != 0 {
		n += 1 + protowire.SizeVarint(uint64(t.ElapsedUs))
	}
	if len(t.Logits) > 0 {
		n += 1 + protowire.SizeBytes(4*len(t.Logits))
	}
	if t.Predicted != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(t.Predicted)))
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if t.Token != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(t.Token)))
	}
	if t.Piece != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, t.Piece)
	}
	if t.ElapsedUs != 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(t.ElapsedUs))
	}
	if len(t.Logits) > 0 {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(4*len(t.Logits)))
		for _, f := range t.Logits {
			b = protowire.AppendFixed32(b, math.Float32bits(f))
		}
	}
	if t.Predicted != 0 {
		b = protowire.AppendTag(b, 5, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(t.Predicted)))
	}
	return b
}
