package protocol

import (
	"reflect"
	"testing"

	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"google.golang.org/protobuf/proto"
)

func TestControlSpansRoundTrip(t *testing.T) {
	m := policy.Manifest{Template: "chat:chatml", Segments: []policy.Segment{
		{ID: "s", Kind: policy.KindSystem, Text: "<|im_start|>system\nx<|im_end|>\n", Stable: true,
			Control: []policy.ControlSpan{{Start: 0, End: 12}, {Start: 20, End: 30}}},
		{ID: "u", Kind: policy.KindUserTurn, Text: "plain"},
	}}
	b, err := proto.Marshal(ManifestToWire(m))
	if err != nil {
		t.Fatal(err)
	}
	var w pb.Manifest
	if err := proto.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	got := ManifestFromWire(&w)
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip changed the manifest:\n got %+v\nwant %+v", got, m)
	}
	if got.Digest() != m.Digest() {
		t.Fatal("round trip changed the digest")
	}
}
