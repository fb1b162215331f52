package sidecar

import (
	"context"
	"testing"

	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// TestHotAutoDerivesTheBudget: HotAuto makes the trained window the hot
// budget (memory permitting), so sessions run through the hot set.
func TestHotAutoDerivesTheBudget(t *testing.T) {
	dir := t.TempDir()
	srv, err := New(context.Background(), Config{Engine: llama.Backend{}, ModelPath: testmodel.Stories(t), HotTokens: HotAuto, TurnLatency: -1, ArenaBytes: 16 << 20, NoCold: true,
		DataDir: dir, SocketPath: dir + "/s.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp := srv.Handle(context.Background(), 0, &pb.Request{Body: &pb.Request_Status{Status: &pb.StatusRequest{}}}, nil)
	c := resp.GetStatus().GetCapacity()
	window := int64(resp.GetStatus().GetModel().GetTrainedContext())
	if c.GetHotTokens() != window || c.GetSessionTokens() <= window {
		t.Errorf("hot %d of a %d-token window, session limit %d", c.GetHotTokens(), window, c.GetSessionTokens())
	}
}
