package client

import (
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// tokenDecoder decodes the DATA frames of a streamed decode without the
// protobuf runtime: a StreamEvent holding one TokenEvent with token,
// piece, elapsed_us and predicted (ctxd.proto) becomes a Token directly,
// with no message allocated and the piece's string shared with earlier
// tokens of the same text. Anything else — progress, logits, a field this
// version does not know, a repeated oneof, invalid UTF-8, a malformed
// varint — is declined, and the caller decodes the frame with
// proto.Unmarshal as before, so both paths accept and reject the same
// payloads and give the same values (TestTokenWireMatchesProto).
//
// The protobuf runtime decodes a oneof through reflection and allocates
// the event, its oneof wrapper, the TokenEvent and the piece: about 1 µs
// and 4 allocations a token, which a fast model streams thousands of
// times a second. One decoder per Client, used by whoever holds the
// reader role.
type tokenDecoder struct {
	pieces map[string]string // piece text -> the string already handed out
}

// maxPieces bounds the piece cache: a vocabulary's common pieces fit, a
// peer sending endless distinct pieces cannot grow it further.
const maxPieces = 8192

// Field numbers of StreamEvent and TokenEvent (protocol/ctxdpb/ctxd.proto).
const (
	fieldStreamEventToken = 1
	fieldTokenToken       = 1
	fieldTokenPiece       = 2
	fieldTokenElapsedUs   = 3
	fieldTokenPredicted   = 5
)

// decode returns the Token payload encodes, or false when payload is not
// a plain token event (the caller then uses proto.Unmarshal).
func (d *tokenDecoder) decode(payload []byte) (Token, bool) {
	num, typ, n := protowire.ConsumeTag(payload)
	if n < 0 || num != fieldStreamEventToken || typ != protowire.BytesType {
		return Token{}, false
	}
	body, m := protowire.ConsumeBytes(payload[n:])
	if m < 0 || n+m != len(payload) {
		return Token{}, false // a second field (or oneof member) follows: merge semantics, leave it to proto
	}
	var t Token
	for len(body) > 0 {
		num, typ, n := protowire.ConsumeTag(body)
		if n < 0 {
			return Token{}, false
		}
		body = body[n:]
		switch {
		case typ == protowire.VarintType && (num == fieldTokenToken || num == fieldTokenElapsedUs || num == fieldTokenPredicted):
			v, n := protowire.ConsumeVarint(body)
			if n < 0 {
				return Token{}, false
			}
			body = body[n:]
			switch num {
			case fieldTokenToken:
				t.ID = int32(v)
			case fieldTokenElapsedUs:
				t.Elapsed = time.Duration(int64(v)) * time.Microsecond
			default:
				t.Predicted = int32(v)
			}
		case typ == protowire.BytesType && num == fieldTokenPiece:
			b, n := protowire.ConsumeBytes(body)
			if n < 0 || !utf8.Valid(b) {
				return Token{}, false
			}
			body = body[n:]
			t.Piece = d.piece(b)
		default:
			return Token{}, false // logits or a field this version does not know
		}
	}
	return t, true
}

// piece is b as a string, shared with earlier pieces of the same text.
func (d *tokenDecoder) piece(b []byte) string {
	if s, ok := d.pieces[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	if d.pieces == nil {
		d.pieces = make(map[string]string)
	}
	if len(d.pieces) < maxPieces {
		d.pieces[s] = s
	}
	return s
}
