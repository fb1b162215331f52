package sidecar

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// TestShutdownIsBounded: a call that does not finish cannot hold shutdown
// past its context; once the call ends, Close completes.
func TestShutdownIsBounded(t *testing.T) {
	ts := startServer(t, Config{ContextTokens: 1024, IdleSnapshot: -1})
	s := openSession(t, dial(t, ts))
	ctx := context.Background()
	if _, err := s.EnsurePrefix(ctx, manifest(" One day.")); err != nil {
		t.Fatal(err)
	}
	inEmit, unblock := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		first := true
		ts.srv.Handle(ctx, 0, &pb.Request{Body: &pb.Request_Decode{Decode: &pb.DecodeRequest{SessionId: s.ID(), MaxTokens: 50}}},
			func(*pb.StreamEvent) error {
				if first {
					first = false
					close(inEmit)
					<-unblock // a stuck stream
				}
				return nil
			})
	}()
	<-inEmit
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := ts.srv.Shutdown(sctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a stuck call: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("Shutdown took %v past its 300 ms context", d)
	}
	close(unblock)
	<-done
	if err := ts.srv.Close(); err != nil {
		t.Fatalf("Close after the call ended: %v", err)
	}
}
