package sidecar

import (
	"context"
	"sync"
	"time"

	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// streamWriter sends one call's DATA frames on its connection. A frame
// that follows the call's previous write within the coalescing window
// (policy.HoldFrame) is queued on the channel instead of written: it
// leaves, in order, in front of the next frame written on the connection
// (the call's next token past the window, its RESPONSE, another call's
// frame), or when the call is about to wait for another session's turn
// (flushStream). So a fast decode wakes its client once per window
// instead of once per token. There is no timer: arming one per group
// woke Go's network poller twice a group, which cost more than the
// writes it saved (docs/BENCHMARKS.md, issue 17).
type streamWriter struct {
	ch     *protocol.Channel
	stream uint32
	window time.Duration

	mu   sync.Mutex
	last time.Time // this call's last write; zero before the first frame
}

func newStreamWriter(ch *protocol.Channel, stream uint32, window time.Duration) *streamWriter {
	return &streamWriter{ch: ch, stream: stream, window: window}
}

// emit is the call's Emitter.
func (w *streamWriter) emit(ev *pb.StreamEvent) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if policy.HoldFrame(now.Sub(w.last), w.last.IsZero(), w.window) {
		return w.ch.Queue(w.stream, protocol.TypeData, 0, ev)
	}
	w.last = now
	return w.ch.WriteMessage(w.stream, protocol.TypeData, 0, ev)
}

// flush writes the held frames now.
func (w *streamWriter) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = time.Now()
	return w.ch.FlushQueued()
}

type streamFlushKey struct{}

// withStreamFlush lets flushStream on ctx send the frames w holds.
func withStreamFlush(ctx context.Context, w *streamWriter) context.Context {
	return context.WithValue(ctx, streamFlushKey{}, w)
}

// flushStream sends the DATA frames the call of ctx holds, before it
// waits (for another session's turn): held tokens do not wait with it.
// A failure is the connection's, and the call's next write reports it.
func flushStream(ctx context.Context) {
	if w, ok := ctx.Value(streamFlushKey{}).(*streamWriter); ok {
		w.flush()
	}
}
