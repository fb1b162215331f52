package acceptloop

import (
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// Temporary reports whether an Accept error passes by itself: the
// descriptor table is full (EMFILE, ENFILE), the kernel is short of
// buffers or memory, the connection was aborted or reset before it was
// accepted, or the call was interrupted or timed out.
func Temporary(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Backoff is one accept loop's pause after temporary errors.
type Backoff struct {
	Log  *slog.Logger
	What string // "HTTP", "Unix socket": named in the log line

	delay  time.Duration
	errors atomic.Uint64 // temporary errors in all
}

// Wait sleeps before the next Accept after err: 5 ms, doubling to 1 s.
// The first error of an episode is logged at warn level. It returns false
// when done closes first.
func (b *Backoff) Wait(err error, done <-chan struct{}) bool {
	b.errors.Add(1)
	if b.delay == 0 && b.Log != nil {
		b.Log.Warn("accepting connections failed; backing off until it passes", "listener", b.What, "err", err)
	}
	b.delay = min(max(2*b.delay, 5*time.Millisecond), time.Second)
	t := time.NewTimer(b.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// Reset ends an episode: an Accept succeeded.
func (b *Backoff) Reset() {
	if b.delay != 0 && b.Log != nil {
		b.Log.Info("accepting connections again", "listener", b.What)
	}
	b.delay = 0
}

// Errors counts the temporary errors seen.
func (b *Backoff) Errors() uint64 { return b.errors.Load() }
