package client

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// viaProto decodes payload as the protobuf runtime does and converts it as
// Decode does; ok is false when proto.Unmarshal refuses it or it is not
// a token event.
func viaProto(payload []byte) (Token, bool, error) {
	var ev pb.StreamEvent
	if err := proto.Unmarshal(payload, &ev); err != nil {
		return Token{}, false, err
	}
	t := ev.GetToken()
	if t == nil {
		return Token{}, false, nil
	}
	return Token{ID: t.GetToken(), Piece: t.GetPiece(), Elapsed: time.Duration(t.GetElapsedUs()) * time.Microsecond, Logits: t.GetLogits(), Predicted: t.GetPredicted()}, true, nil
}

// checkTokenWire fails when the fast path accepts payload but proto
// refuses it or decodes something else.
func checkTokenWire(t *testing.T, d *tokenDecoder, payload []byte) (fast bool) {
	t.Helper()
	got, ok := d.decode(payload)
	if !ok {
		return false
	}
	want, isToken, err := viaProto(payload)
	if err != nil || !isToken {
		t.Fatalf("fast path accepted %x, proto: token %v, %v", payload, isToken, err)
	}
	if got.ID != want.ID || got.Piece != want.Piece || got.Elapsed != want.Elapsed || got.Predicted != want.Predicted || len(want.Logits) != 0 {
		t.Fatalf("%x: fast %+v, proto %+v", payload, got, want)
	}
	return true
}

// TestTokenWireMatchesProto: the daemon's token events (every field, any
// value, in the protobuf encoder's output) take the fast path and decode
// as proto.Unmarshal decodes them; whatever else a peer may send — logits,
// progress, unknown fields, repeated members, truncations, invalid UTF-8,
// random bytes — is either declined or decoded the same.
func TestTokenWireMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var d tokenDecoder
	ints := []int32{0, 1, -1, 127, 128, math.MaxInt32, math.MinInt32}
	pieces := []string{"", " the", "é", "日本", "\n", "\x00", "a b"}
	for i := 0; i < 5000; i++ {
		tok := &pb.TokenEvent{Token: ints[rng.IntN(len(ints))] + rng.Int32N(1000), Piece: pieces[rng.IntN(len(pieces))],
			ElapsedUs: rng.Int64() >> rng.IntN(64), Predicted: ints[rng.IntN(len(ints))]}
		if i%7 == 0 {
			tok.ElapsedUs = -tok.ElapsedUs
		}
		payload, err := proto.Marshal(&pb.StreamEvent{Body: &pb.StreamEvent_Token{Token: tok}})
		if err != nil {
			t.Fatal(err)
		}
		if !checkTokenWire(t, &d, payload) {
			t.Fatalf("the daemon's token event %v (%x) missed the fast path", tok, payload)
		}
		// Mutations: truncated, a byte changed, a field appended.
		checkTokenWire(t, &d, payload[:rng.IntN(len(payload)+1)])
		m := append([]byte(nil), payload...)
		m[rng.IntN(len(m))] = byte(rng.Uint32())
		checkTokenWire(t, &d, m)
		checkTokenWire(t, &d, protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), payload...), protowire.Number(1+rng.IntN(3)), protowire.VarintType), 7))
	}
	declined := map[string]*pb.StreamEvent{
		"logits":   {Body: &pb.StreamEvent_Token{Token: &pb.TokenEvent{Token: 3, Logits: []float32{1, 2}}}},
		"progress": {Body: &pb.StreamEvent_Progress{Progress: &pb.ProgressEvent{Phase: "prefill", Done: 1, Total: 2}}},
	}
	for name, ev := range declined {
		payload, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if checkTokenWire(t, &d, payload) {
			t.Errorf("%s took the fast path", name)
		}
	}
	bad := map[string][]byte{
		"invalid UTF-8 piece": {0x0a, 0x04, 0x12, 0x02, 0xff, 0xfe},
		"unknown field":       {0x0a, 0x02, 0x30, 0x01},
		"two token members":   {0x0a, 0x02, 0x08, 0x01, 0x0a, 0x02, 0x28, 0x02},
		"field number 0":      {0x0a, 0x02, 0x00, 0x01},
		"overlong varint":     {0x0a, 0x0b, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	}
	for name, payload := range bad {
		if checkTokenWire(t, &d, payload) {
			t.Errorf("%s took the fast path", name)
		}
	}
	for i := 0; i < 20000; i++ {
		b := make([]byte, rng.IntN(24))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if len(b) > 1 && i%2 == 0 {
			b[0], b[1] = 0x0a, byte(len(b)-2)
		}
		checkTokenWire(t, &d, b)
	}
}

// TestTokenWirePieceCacheIsBounded: pieces are shared, and a peer sending
// endless distinct pieces does not grow the cache past maxPieces.
func TestTokenWirePieceCacheIsBounded(t *testing.T) {
	var d tokenDecoder
	enc := func(piece string) []byte {
		b, err := proto.Marshal(&pb.StreamEvent{Body: &pb.StreamEvent_Token{Token: &pb.TokenEvent{Piece: piece}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, _ := d.decode(enc(" once"))
	b, _ := d.decode(enc(" once"))
	if a.Piece != " once" || b.Piece != " once" || len(d.pieces) != 1 {
		t.Fatalf("pieces %q %q, cache %d", a.Piece, b.Piece, len(d.pieces))
	}
	for i := 0; i < 2*maxPieces; i++ {
		want := string(rune('a'+i%26)) + string(rune(0x100+i))
		if got, ok := d.decode(enc(want)); !ok || got.Piece != want {
			t.Fatalf("piece %d: %q %v", i, got.Piece, ok)
		}
	}
	if len(d.pieces) != maxPieces {
		t.Fatalf("cache holds %d pieces, bound %d", len(d.pieces), maxPieces)
	}
}

// FuzzTokenWire: any payload the fast path accepts, proto.Unmarshal
// accepts and decodes to the same token.
func FuzzTokenWire(f *testing.F) {
	for _, tok := range []*pb.TokenEvent{{}, {Token: 5, Piece: " x", ElapsedUs: 1234}, {Token: -1, Predicted: 9}, {Logits: []float32{1}}} {
		b, _ := proto.Marshal(&pb.StreamEvent{Body: &pb.StreamEvent_Token{Token: tok}})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var d tokenDecoder
		checkTokenWire(t, &d, payload)
	})
}
