package client

import (
	"errors"
	"reflect"
	"testing"

	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

func TestManifestConvertsToPolicy(t *testing.T) {
	m := Manifest{Template: "chatml", Segments: []Segment{
		{ID: "sys", Kind: KindSystem, Class: ClassTaskPinned, Text: "<|im_start|>system", Stable: true, Control: []ControlSpan{{0, 12}}},
		{ID: "diff", Kind: KindDiff, Class: ClassVolatile, InvalidateOnEdit: true, InvalidateOnTurn: true, Paths: []string{"a.go"}, Tokens: []int32{7}},
	}}
	want := policy.Manifest{Template: "chatml", Segments: []policy.Segment{
		{ID: "sys", Kind: policy.KindSystem, Class: policy.ClassTaskPinned, Text: "<|im_start|>system", Stable: true, Control: []policy.ControlSpan{{Start: 0, End: 12}}},
		{ID: "diff", Kind: policy.KindDiff, Class: policy.ClassVolatile, InvalidateOnEdit: true, InvalidateOnTurn: true, Paths: []string{"a.go"}, Tokens: []int32{7}},
	}}
	got := m.policyManifest()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	if n, k := reflect.TypeOf(policy.Segment{}).NumField(), reflect.TypeOf(Segment{}).NumField(); n != k {
		t.Fatalf("policy.Segment has %d fields, client.Segment %d: mirror the new one", n, k)
	}
	for k := KindUnspecified; k <= KindUserTurn; k++ {
		if k.String() != policy.SegmentKind(k).String() || int32(k) != int32(pb.SegmentKind(k)) {
			t.Errorf("kind %d: %s", k, k)
		}
	}
}

func TestStopReasonFromWire(t *testing.T) {
	for w, want := range map[pb.StopReason]StopReason{
		pb.StopReason_STOP_REASON_UNSPECIFIED:       StopUnknown,
		pb.StopReason_STOP_REASON_MAX_TOKENS:        StopMaxTokens,
		pb.StopReason_STOP_REASON_END_OF_GENERATION: StopEOG,
		pb.StopReason_STOP_REASON_STOP_STRING:       StopString,
		pb.StopReason_STOP_REASON_CANCELLED:         StopCancelled,
		pb.StopReason_STOP_REASON_CONTEXT_FULL:      StopContextFull,
		pb.StopReason(99):                           StopUnknown,
	} {
		if got := stopReasonFromWire(w); got != want {
			t.Errorf("%v: got %v, want %v", w, got, want)
		}
	}
	if StopEOG.String() != "end_of_generation" || StopReason(42).String() != "StopReason(42)" {
		t.Errorf("names: %s %s", StopEOG, StopReason(42))
	}
}

func TestRemoteErrorKeepsSentinelAndText(t *testing.T) {
	err := remoteError(&pb.Error{Code: pb.ErrorCode_ERROR_CODE_CONTEXT_OVERFLOW, Message: "too long",
		Overflow: &pb.Overflow{PromptTokens: 300, ContextTokens: 256}})
	re, ok := err.(*RemoteError)
	if !ok || re.Overflow == nil || re.Overflow.PromptTokens != 300 || re.Message != "too long" {
		t.Fatalf("%#v", err)
	}
	if !errors.Is(err, ErrContextOverflow) || errors.Is(err, ErrNotFound) || re.Error() == "" {
		t.Fatalf("%v", err)
	}
	if remoteError(nil) != nil {
		t.Fatal("nil wire error must give nil")
	}
}
