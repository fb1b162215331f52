package sidecar

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// TestLongDecodeSharesTheEngine: while one session streams a long decode,
// status, explain, snapshot listing and metrics answer at once, and
// another session's whole turn completes before the decode ends.
func TestLongDecodeSharesTheEngine(t *testing.T) {
	ts := startServer(t, Config{ContextTokens: 2048, IdleSnapshot: -1})
	ctx := context.Background()
	c := dial(t, ts)
	long := openSession(t, c)
	if _, err := long.EnsurePrefix(ctx, manifest(" One day.")); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var first atomic.Bool
	var done atomic.Bool
	finished := make(chan *pb.Response, 1)
	go func() {
		// In process, so the test paces the stream: each token's event
		// takes 2 ms to deliver, as a slow client's would.
		resp := ts.srv.Handle(ctx, 0, &pb.Request{Body: &pb.Request_Decode{Decode: &pb.DecodeRequest{SessionId: long.ID(), MaxTokens: 1000}}},
			func(*pb.StreamEvent) error {
				if first.CompareAndSwap(false, true) {
					close(started)
				}
				time.Sleep(2 * time.Millisecond)
				return nil
			})
		done.Store(true)
		finished <- resp
	}()
	<-started
	still := func(what string) {
		t.Helper()
		if done.Load() {
			t.Fatalf("%s answered only after the long decode ended", what)
		}
	}
	if _, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	}
	still("status")
	if _, err := c.Explain(ctx, long.ID()); err != nil {
		t.Fatal(err)
	}
	still("explain")
	if _, err := c.Snapshots(ctx); err != nil {
		t.Fatal(err)
	}
	still("snapshot listing")
	if _, err := c.Metrics(ctx); err != nil {
		t.Fatal(err)
	}
	still("metrics")
	other := openSession(t, dial(t, ts))
	runTurn(t, other, manifest(" Tom had a big blue car."), 4)
	still("another session's turn")
	resp := <-finished
	if resp.GetError() != nil || resp.GetDecode().GetTokens() == 0 {
		t.Fatalf("long decode: %v", resp.GetError())
	}
}
