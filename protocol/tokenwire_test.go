package protocol

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/protocol/ctxdpb"
)

// TestAppendTokenEventMatchesProto: a token event is encoded exactly as
// proto.Marshal encodes it, for any field values; an invalid UTF-8 piece
// is left to proto, which refuses it.
func TestAppendTokenEventMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ints := []int32{0, 0, 1, -1, 127, 128, 300, math.MaxInt32, math.MinInt32}
	pieces := []string{"", " the", "é", "日本語", "\n", "\x00"}
	for i := 0; i < 20000; i++ {
		tok := &ctxdpb.TokenEvent{Token: ints[rng.IntN(len(ints))], Piece: pieces[rng.IntN(len(pieces))], Predicted: ints[rng.IntN(len(ints))]}
		switch rng.IntN(3) {
		case 1:
			tok.ElapsedUs = rng.Int64() >> rng.IntN(64)
		case 2:
			tok.ElapsedUs = -rng.Int64() >> rng.IntN(64)
		}
		if rng.IntN(4) == 0 {
			tok.Logits = make([]float32, rng.IntN(40))
			for j := range tok.Logits {
				tok.Logits[j] = float32(rng.NormFloat64())
			}
			if len(tok.Logits) > 0 && rng.IntN(2) == 0 {
				tok.Logits[0] = float32(math.NaN())
			}
		}
		ev := &ctxdpb.StreamEvent{Body: &ctxdpb.StreamEvent_Token{Token: tok}}
		want, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := marshalAppend([]byte("prefix"), ev)
		if err != nil || !bytes.Equal(got[6:], want) || string(got[:6]) != "prefix" {
			t.Fatalf("%v:\n got %x (%v)\nwant %x", tok, got, err, want)
		}
	}
	bad := &ctxdpb.StreamEvent{Body: &ctxdpb.StreamEvent_Token{Token: &ctxdpb.TokenEvent{Piece: "\xff"}}}
	if _, err := marshalAppend(nil, bad); err == nil {
		t.Fatal("an invalid UTF-8 piece was encoded")
	}
	// Other events and an empty token body go through proto unchanged.
	for _, ev := range []*ctxdpb.StreamEvent{
		{Body: &ctxdpb.StreamEvent_Token{}},
		{Body: &ctxdpb.StreamEvent_Progress{Progress: &ctxdpb.ProgressEvent{Phase: "prefill", Done: 3, Total: 9}}},
		{},
	} {
		want, _ := proto.Marshal(ev)
		if got, err := marshalAppend(nil, ev); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%v: %x, want %x (%v)", ev, got, want, err)
		}
	}
}
