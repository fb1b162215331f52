package sidecar_test

import (
	"testing"

	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// TestFakeCountTokensMatchesATurn: CountTokens is the prompt a turn with the
// same manifest holds, with nothing prefilled; ModelFacts are the engine's.
func TestFakeCountTokensMatchesATurn(t *testing.T) {
	d := startFake(t, sidecar.Config{}, enginefake.Options{})
	m := policy.Manifest{Template: "chat:test", Segments: []policy.Segment{
		{ID: "system", Kind: policy.KindSystem, Stable: true, Text: "You are a helpful agent."},
		{ID: "msg-0", Kind: policy.KindUserTurn, Text: "Count me."},
	}}
	n, err := d.srv.CountTokens(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	id := d.open("count")
	r := d.mustEnsure(id, protocol.ManifestToWire(m))
	ps := d.must(d.call(&pb.Request{Body: &pb.Request_PrefillSuffix{PrefillSuffix: &pb.PrefillSuffixRequest{SessionId: id}}}, nil)).GetPrefillSuffix()
	if int64(n) != ps.GetPromptTokens() || r.GetPromptTokens() == 0 {
		t.Errorf("CountTokens %d, the turn's prompt %d", n, ps.GetPromptTokens())
	}
	if f, ok := d.srv.ModelFacts(); !ok || f.VocabSize == 0 {
		t.Errorf("ModelFacts %+v %v", f, ok)
	}
	if _, err := d.srv.CountTokens(t.Context(), policy.Manifest{Segments: []policy.Segment{{ID: ""}}}); err == nil {
		t.Error("an invalid manifest was counted")
	}
}
