package sidecar_test

import (
	"testing"

	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// TestFakeImplausibleWindowCapped: a model claiming a 2^31−1 window is
// planned with policy.MaxPlausibleWindow (a warning says so), so the
// default daemon does not size its hot set to all of memory. Before, the
// hot budget was every token memory could hold.
func TestFakeImplausibleWindowCapped(t *testing.T) {
	o := enginefake.DefaultOptions()
	o.TrainedContext = 1<<31 - 1
	d := startFake(t, sidecar.Config{HotTokens: sidecar.HotAuto, ArenaBytes: 1 << 20, NoCold: true}, o)
	st := d.must(d.call(&pb.Request{Body: &pb.Request_Status{Status: &pb.StatusRequest{}}}, nil)).GetStatus()
	if hot := st.GetCapacity().GetHotTokens(); hot <= 0 || hot > policy.MaxPlausibleWindow {
		t.Fatalf("hot budget %d for a claimed 2^31−1 window, want within (0, %d]", hot, policy.MaxPlausibleWindow)
	}
}
