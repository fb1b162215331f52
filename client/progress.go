package client

import "context"

// Progress is how far a long call is: Done of Total tokens (Phase
// "prefill") or blocks (Phase "restore").
type Progress struct {
	Phase       string
	Done, Total int64
}

type progressKey struct{}

// WithProgress returns a context under which EnsurePrefix, PrefillSuffix
// and Restore ask the daemon for progress and call fn with it (on the
// calling goroutine, at most about every 100 ms, and once at the end).
func WithProgress(ctx context.Context, fn func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

// progressEvents returns whether ctx wants progress and the event handler
// that delivers it.
func progressEvents(ctx context.Context) (bool, func(*event) error) {
	fn, ok := ctx.Value(progressKey{}).(func(Progress))
	if !ok || fn == nil {
		return false, nil
	}
	return true, func(ev *event) error {
		if p := ev.msg.GetProgress(); p != nil {
			fn(Progress{Phase: p.GetPhase(), Done: p.GetDone(), Total: p.GetTotal()})
		}
		return nil
	}
}

type exactKey struct{}

// WithExactReuse returns a context under which EnsurePrefix and
// PrefillSuffix ask for exact reuse: only KV equal to a cold prefill is
// kept (no segment moved past an early change, nothing approximate kept
// from an earlier turn), whatever the daemon's --reuse mode.
func WithExactReuse(ctx context.Context) context.Context {
	return context.WithValue(ctx, exactKey{}, true)
}

func exactReuse(ctx context.Context) bool {
	v, _ := ctx.Value(exactKey{}).(bool)
	return v
}
