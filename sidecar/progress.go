package sidecar

import (
	"context"
	"time"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// Progress of long calls. A request with progress set gets ProgressEvents
// (DATA frames) while it prefills or restores: done of total tokens or
// blocks, at most every progressEvery and always at the end.

const progressEvery = 100 * time.Millisecond

type progressKey struct{}

type progressFunc func(phase string, done, total int64)

// withProgress makes reportProgress on ctx emit ProgressEvents.
func withProgress(ctx context.Context, on bool, emit Emitter) context.Context {
	if !on || emit == nil {
		return ctx
	}
	var last time.Time
	f := progressFunc(func(phase string, done, total int64) {
		if done < total && time.Since(last) < progressEvery {
			return
		}
		last = time.Now()
		// A failed emit means the client is gone; its cancellation ends
		// the call.
		emit(&pb.StreamEvent{Body: &pb.StreamEvent_Progress{Progress: &pb.ProgressEvent{Phase: phase, Done: done, Total: total}}})
	})
	return context.WithValue(ctx, progressKey{}, f)
}

// reportProgress tells the caller, when it asked, how far a call is.
func reportProgress(ctx context.Context, phase string, done, total int) {
	if f, ok := ctx.Value(progressKey{}).(progressFunc); ok {
		f(phase, int64(done), int64(total))
	}
}

// wantsProgress reports whether ctx carries a progress reporter.
func wantsProgress(ctx context.Context) bool {
	_, ok := ctx.Value(progressKey{}).(progressFunc)
	return ok
}
