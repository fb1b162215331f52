package clientconv

import (
	"reflect"
	"testing"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/policy"
)

func TestManifestKeepsEveryField(t *testing.T) {
	p := policy.Manifest{Template: "chatml", Segments: []policy.Segment{
		{ID: "sys", Kind: policy.KindSystem, Class: policy.ClassTaskPinned, Text: "<|im_start|>system", Stable: true,
			Control: []policy.ControlSpan{{Start: 0, End: 12}}},
		{ID: "diff", Kind: policy.KindDiff, Class: policy.ClassVolatile, InvalidateOnEdit: true, InvalidateOnTurn: true,
			Paths: []string{"a.go"}, Tokens: []int32{1, 2, 3}},
	}}
	want := client.Manifest{Template: "chatml", Segments: []client.Segment{
		{ID: "sys", Kind: client.KindSystem, Class: client.ClassTaskPinned, Text: "<|im_start|>system", Stable: true,
			Control: []client.ControlSpan{{Start: 0, End: 12}}},
		{ID: "diff", Kind: client.KindDiff, Class: client.ClassVolatile, InvalidateOnEdit: true, InvalidateOnTurn: true,
			Paths: []string{"a.go"}, Tokens: []int32{1, 2, 3}},
	}}
	if got := Manifest(p); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// Field for field: a field added to policy.Segment must be added here.
	if n, m := reflect.TypeOf(policy.Segment{}).NumField(), reflect.TypeOf(client.Segment{}).NumField(); n != m {
		t.Fatalf("policy.Segment has %d fields, client.Segment %d", n, m)
	}
	if client.KindUserTurn.String() != policy.KindUserTurn.String() || client.ClassRepoMap.String() != "repo_map" {
		t.Fatal("kind or class names differ")
	}
}
