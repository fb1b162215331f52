package httpapi

import (
	"context"
	"testing"

	"github.com/ctxd/ctxd/internal/testmodel"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// TestUnloadAfterHTTPRequests: the sessions the door keeps between
// requests are given back when the model is unloaded or replaced; before,
// unload and load answered MODEL_BUSY until ctxd restarted.
func TestUnloadAfterHTTPRequests(t *testing.T) {
	d := startDoor(t, sidecar.Config{ContextTokens: 256, NoCold: true}, Config{})
	if code, _, body := d.post("/v1/chat/completions", `{"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":4}`); code != 200 {
		t.Fatalf("chat: %d %s", code, body)
	}
	ctx := context.Background()
	conn := d.p.Server.NewConnID()
	if resp := d.p.Server.Handle(ctx, conn, &pb.Request{Body: &pb.Request_UnloadModel{UnloadModel: &pb.UnloadModelRequest{}}}, nil); resp.GetError() != nil {
		t.Fatalf("unload after an HTTP request: %v", resp.GetError())
	}
	if resp := d.p.Server.Handle(ctx, conn, &pb.Request{Body: &pb.Request_LoadModel{LoadModel: &pb.LoadModelRequest{Path: testmodel.Stories(t), ContextTokens: 256}}}, nil); resp.GetError() != nil {
		t.Fatalf("load: %v", resp.GetError())
	}
	if code, _, body := d.post("/v1/chat/completions", `{"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":4}`); code != 200 {
		t.Fatalf("chat after the reload: %d %s", code, body)
	}
	if resp := d.p.Server.Handle(ctx, conn, &pb.Request{Body: &pb.Request_LoadModel{LoadModel: &pb.LoadModelRequest{Path: testmodel.Stories(t), ContextTokens: 256}}}, nil); resp.GetError() != nil {
		t.Fatalf("load over the model after more requests: %v", resp.GetError())
	}
}
