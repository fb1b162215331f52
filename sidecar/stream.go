package sidecar

import (
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
// (the next token past the window, the call's RESPONSE, another call's
// frame) or when the window has passed, whichever comes first. So a fast
// decode wakes its client once per window instead of once per token, and
// no frame waits longer than the window.
type streamWriter struct {
	ch     *protocol.Channel
	stream uint32
	window time.Duration

	mu    sync.Mutex
	last  time.Time   // this call's last write; zero before the first frame
	timer *time.Timer // flushes held frames at last+window; nil until needed
	held  bool        // frames are queued and the timer is armed
	done  bool
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
		if err := w.ch.Queue(w.stream, protocol.TypeData, 0, ev); err != nil {
			return err
		}
		if !w.held {
			w.held = true
			wait := w.window - now.Sub(w.last)
			if w.timer == nil {
				w.timer = time.AfterFunc(wait, w.flush)
			} else {
				w.timer.Reset(wait)
			}
		}
		return nil
	}
	w.disarm()
	w.last = now
	return w.ch.WriteMessage(w.stream, protocol.TypeData, 0, ev)
}

// flush writes the held frames when the window has passed without
// another write (the timer's goroutine).
func (w *streamWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.held || w.done {
		return
	}
	w.held = false
	w.last = time.Now()
	w.ch.FlushQueued() // a failure is sticky: the call's next write reports it
}

// disarm stops the timer; the caller holds mu and is about to write,
// which carries any held frames.
func (w *streamWriter) disarm() {
	if w.held {
		w.timer.Stop()
		w.held = false
	}
}

// finish ends the call's stream: the timer is stopped, and the held
// frames leave with the RESPONSE the caller writes next.
func (w *streamWriter) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.disarm()
	w.done = true
}
